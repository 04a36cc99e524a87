//! The researcher API (`trainyard.v1`, proto/trainyard/v1/trainyard.proto): generated types,
//! the service with its security (auth.rs, rate.rs), Submit's objects, the server and the client.

pub mod auth;
pub mod client;
pub mod rate;
pub mod server;
pub mod service;
pub mod submit;

/// Generated from proto/trainyard/v1/trainyard.proto.
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("trainyard.v1");

    /// The encoded descriptor set, for gRPC reflection.
    pub const DESCRIPTOR: &[u8] = tonic::include_file_descriptor_set!("trainyard_v1_descriptor");
}
