//! Self-contained HTML reports: one file, inline CSS and SVG charts, no network. A replay's
//! report shows the cluster and the queue over time and the waits per size class and tenant
//! ([`replay_page`]); a sweep's shows the metrics across its points ([`sweep_page`]).
//!
//! A short inline script marks, once the page is laid out, how many charts the browser drew
//! with a non-empty box and any script error, on `<body>` (`data-charts`, `data-charts-drawn`,
//! `data-errors`): what a headless browser checks.

pub mod charts;
mod replay_page;
mod sweep_page;

pub use replay_page::replay_page;
pub use sweep_page::sweep_page;

/// Text made safe for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A page being written: sections of headings, paragraphs, tables and charts.
pub(crate) struct Page {
    title: String,
    body: String,
    charts: usize,
}

impl Page {
    pub(crate) fn new(title: &str) -> Page {
        Page { title: title.to_string(), body: String::new(), charts: 0 }
    }

    pub(crate) fn heading(&mut self, text: &str) {
        self.body.push_str(&format!("<h2>{}</h2>\n", escape(text)));
    }

    pub(crate) fn paragraph(&mut self, text: &str) {
        self.body.push_str(&format!("<p>{}</p>\n", escape(text)));
    }

    /// A chart with a caption saying how to read it; a chart that could not be drawn says why
    /// instead.
    pub(crate) fn chart(&mut self, svg: Result<String, String>, caption: &str) {
        match svg {
            Ok(svg) => {
                self.charts += 1;
                self.body.push_str(&format!(
                    "<figure class=\"chart\">\n{}\n<figcaption>{}</figcaption>\n</figure>\n",
                    svg.trim(),
                    escape(caption)
                ));
            }
            Err(e) => self.paragraph(&format!("(chart not drawn: {e})")),
        }
    }

    /// A table: a header row and rows of cells; cells after the first are right-aligned.
    pub(crate) fn table(&mut self, header: &[&str], rows: &[Vec<String>]) {
        self.body.push_str("<table>\n<thead><tr>");
        for h in header {
            self.body.push_str(&format!("<th>{}</th>", escape(h)));
        }
        self.body.push_str("</tr></thead>\n<tbody>\n");
        for row in rows {
            self.body.push_str("<tr>");
            for cell in row {
                self.body.push_str(&format!("<td>{}</td>", escape(cell)));
            }
            self.body.push_str("</tr>\n");
        }
        self.body.push_str("</tbody>\n</table>\n");
    }

    /// The whole document.
    pub(crate) fn finish(self) -> String {
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <meta name=\"generator\" content=\"trainyard\">\n<title>{title}</title>\n\
             <style>\n{STYLE}</style>\n</head>\n<body data-expected-charts=\"{charts}\">\n\
             <h1>{title}</h1>\n{body}<script>\n{CHECK}</script>\n</body>\n</html>\n",
            title = escape(&self.title),
            charts = self.charts,
            body = self.body,
        )
    }
}

const STYLE: &str = "body { font-family: sans-serif; margin: 24px auto; max-width: 960px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: right; }
th:first-child, td:first-child { text-align: left; }
figure.chart { margin: 12px 0 20px; } figure.chart svg { max-width: 100%; height: auto; }
figcaption { font-size: 12px; color: #555; }
p { font-size: 14px; }
";

/// Marks on `<body>` what the browser drew: charts whose box has an area and that hold drawn
/// shapes, and the first script error.
const CHECK: &str = "(function () {
  var errors = [];
  window.addEventListener('error', function (e) { errors.push(String(e.message)); mark(); });
  function mark() {
    var charts = document.querySelectorAll('figure.chart svg');
    var drawn = 0;
    charts.forEach(function (svg) {
      var box = svg.getBoundingClientRect();
      var shapes = svg.querySelectorAll('path, polyline, polygon, rect, line, circle');
      if (box.width > 0 && box.height > 0 && shapes.length > 0) { drawn += 1; }
    });
    document.body.setAttribute('data-charts', String(charts.length));
    document.body.setAttribute('data-charts-drawn', String(drawn));
    document.body.setAttribute('data-errors', errors.join(' | '));
  }
  if (document.readyState === 'loading') { document.addEventListener('DOMContentLoaded', mark); } else { mark(); }
})();
";

/// `x` with `decimals` places.
pub(crate) fn number(x: f64, decimals: usize) -> String {
    format!("{x:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_covers_markup_and_quotes() {
        assert_eq!(escape("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
    }

    #[test]
    fn a_page_counts_its_charts_and_says_why_one_is_missing() {
        let mut page = Page::new("T <1>");
        page.chart(Ok("<svg></svg>".into()), "c");
        page.chart(Err("too small".into()), "d");
        page.table(&["a", "b"], &[vec!["x<".into(), "1".into()]]);
        assert_eq!(page.charts, 1);
        let html = page.finish();
        assert!(html.contains("<title>T &lt;1&gt;</title>"));
        assert!(html.contains("data-expected-charts=\"1\""));
        assert!(html.contains("(chart not drawn: too small)"));
        assert!(html.contains("<td>x&lt;</td>"));
    }
}
