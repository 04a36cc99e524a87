//! Plain HTTP/1.1 on 127.0.0.1, for what speaks it without TLS: etcd's JSON gateway and
//! trainyard's `/metrics`, `/healthz` and `/readyz`. One request per connection.

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An answer.
#[derive(Clone, Debug)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The body, as text.
    pub body: String,
}

impl Reply {
    /// The body as JSON.
    pub fn json(&self) -> Result<Value> {
        serde_json::from_str(&self.body).with_context(|| format!("not JSON: {}", self.body))
    }
}

/// GET `path` on `127.0.0.1:port`.
pub async fn get(port: u16, path: &str) -> Result<Reply> {
    request(port, "GET", path, None).await
}

/// POST a JSON body.
pub async fn post_json(port: u16, path: &str, body: &Value) -> Result<Reply> {
    request(port, "POST", path, Some(body.to_string())).await
}

async fn request(port: u16, method: &str, path: &str, body: Option<String>) -> Result<Reply> {
    let exchange = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
        let body = body.unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        parse(&raw)
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| anyhow!("no answer from 127.0.0.1:{port}{path} in 10 s"))?
}

/// Parses a whole HTTP/1.1 response (identity or chunked body).
fn parse(raw: &[u8]) -> Result<Reply> {
    let text = String::from_utf8_lossy(raw);
    let (head, rest) = text.split_once("\r\n\r\n").ok_or_else(|| anyhow!("truncated HTTP response"))?;
    let status = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("bad status line in {head:?}"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked { dechunk(rest) } else { rest.to_string() };
    Ok(Reply { status, body })
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// The value of one Prometheus sample (`name` with exactly these labels, in any order), if any.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (metric, label_text) = match series.split_once('{') {
            Some((m, l)) => (m, l.trim_end_matches('}')),
            None => (series, ""),
        };
        if metric != name {
            return None;
        }
        let have: Vec<(&str, &str)> = label_text
            .split(',')
            .filter(|p| !p.is_empty())
            .filter_map(|p| p.split_once('=').map(|(k, v)| (k, v.trim_matches('"'))))
            .collect();
        let same = have.len() == labels.len() && labels.iter().all(|l| have.contains(l));
        if same { value.parse().ok() } else { None }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_and_chunked_bodies_are_read() {
        let plain = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").unwrap();
        assert_eq!((plain.status, plain.body.as_str()), (200, "ok"));
        let chunked =
            parse(b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nstan\r\n4\r\ndby!\r\n0\r\n\r\n")
                .unwrap();
        assert_eq!((chunked.status, chunked.body.as_str()), (503, "standby!"));
    }

    #[test]
    fn a_metric_is_found_by_its_labels() {
        let text = "# HELP x y\ntrainyard_pending{queue=\"a\",reason=\"Quota\"} 3\ntrainyard_pending{queue=\"b\",reason=\"Quota\"} 1\nup 1\n";
        assert_eq!(metric(text, "trainyard_pending", &[("reason", "Quota"), ("queue", "b")]), Some(1.0));
        assert_eq!(metric(text, "up", &[]), Some(1.0));
        assert_eq!(metric(text, "trainyard_pending", &[("queue", "c"), ("reason", "Quota")]), None);
    }
}
