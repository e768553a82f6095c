//! Compiles `proto/*.proto` with protox (pure Rust, no system protoc) and hands the
//! descriptor set to tonic-prost-build.

use std::path::PathBuf;

/// Every enum field of the API's messages, its enum, and whether it is repeated.
const ENUM_FIELDS: [(&str, &str, bool); 15] = [
    (".baton.v1.JobSpec.topology", "Topology", false),
    (".baton.v1.JobSpec.preemption_mode", "PreemptionMode", false),
    (".baton.v1.Job.state", "JobState", false),
    (".baton.v1.ListJobsRequest.states", "JobState", true),
    (".baton.v1.Queue.ordering", "QueueOrdering", false),
    (".baton.v1.Queue.within_queue", "WithinQueue", false),
    (".baton.v1.Queue.visibility", "JobVisibility", false),
    (".baton.v1.Queue.reclaim_within_cohort", "ReclaimWithinCohort", false),
    (".baton.v1.Node.status", "NodeStatus", false),
    (".baton.v1.Replica.role", "ReplicaRole", false),
    (".baton.v1.Event.kind", "EventKind", false),
    (".baton.v1.CreateTokenRequest.roles", "TokenRole", true),
    (".baton.v1.TokenInfo.roles", "TokenRole", true),
    (".baton.v1.WhoAmIReply.roles", "TokenRole", true),
    (".baton.v1.Dependency.when", "DependencyCondition", false),
];

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
    let mut config = tonic_prost_build::configure().type_attribute(".", "#[derive(serde::Serialize)]");
    // An enum field is an i32 in the generated message; its JSON is its word, as the dashboard
    // and its scripts read it (src/words.rs).
    for (field, enum_name, repeated) in ENUM_FIELDS {
        let with = if repeated { "serialize_words" } else { "serialize_word" };
        let attr = format!("#[serde(serialize_with = \"crate::words::{with}::<crate::v1::{enum_name}, _>\")]");
        config = config.field_attribute(field, attr);
    }
    config.build_client(true).build_server(true).compile_fds(fds)?;
    Ok(())
}
