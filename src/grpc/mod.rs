//! The researcher API (`trainyard.v1`, proto/trainyard/v1/trainyard.proto): generated types,
//! the service with its security (auth.rs, rate.rs), Submit's objects, the server and the client.

pub mod auth;
pub mod client;
pub mod rate;
pub mod server;
pub mod service;
pub mod submit;
pub mod tls;

/// Generated from proto/trainyard/v1/trainyard.proto.
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("trainyard.v1");

    /// The encoded descriptor set, for gRPC reflection.
    pub const DESCRIPTOR: &[u8] = tonic::include_file_descriptor_set!("trainyard_v1_descriptor");
}

impl std::fmt::Display for v1::JobRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Seconds since the epoch as UTC RFC 3339 (`t=Ns` when out of range), as the API's texts and
/// the CLI show times.
pub fn utc(seconds: u64) -> String {
    i64::try_from(seconds)
        .ok()
        .and_then(|s| k8s_openapi::jiff::Timestamp::from_second(s).ok())
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|| format!("t={seconds}s"))
}
