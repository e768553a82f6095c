//! Compiles `proto/*.proto` with protox (pure Rust, no system protoc) and hands the
//! descriptor set to tonic-prost-build.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let proto_dir = manifest.join("../../proto");
    let files = ["raft.proto", "baton.proto", "agent.proto"];
    for f in &files {
        println!("cargo:rerun-if-changed={}", proto_dir.join(f).display());
    }
    let fds = protox::compile(files, [&proto_dir])?;
    // Serialize on every message: the replicas' dashboard answers its JSON endpoints with
    // the same messages the gRPC API returns (docs/dashboard.md).
    tonic_prost_build::configure()
        .type_attribute(".", "#[derive(serde::Serialize)]")
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
