//! Compiles the researcher API's protobuf contract (proto/trainyard/v1) with protox, so that no
//! `protoc` binary is needed, into tonic server and client code plus the descriptor set that
//! gRPC reflection serves.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/trainyard/v1/trainyard.proto";
    println!("cargo:rerun-if-changed={proto}");
    let files = protox::compile([proto], ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("trainyard_v1_descriptor.bin"), prost::Message::encode_to_vec(&files))?;
    tonic_prost_build::configure().build_server(true).build_client(true).compile_fds(files)?;
    Ok(())
}
