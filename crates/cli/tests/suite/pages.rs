//! `baton list` against a real replica holding more jobs than one page: the client follows
//! the pages and lists every job; a page larger than the server's bound is refused by name.

use crate::fake;

use std::collections::BTreeMap;
use std::time::Duration;

use baton_proto::make::{gpu_job, gpu_queue};
use baton_proto::v1::agent_gateway_client::AgentGatewayClient;
use baton_proto::v1::baton_client::BatonClient;
use baton_proto::v1::{AttachRequest, ListJobsRequest, NodeInfo, SubmitRequest};
use baton_raft::replica::ReplicaConfig;
use baton_server::{ServerConfig, ServerSettings};
use fake::run;

/// Jobs per page on the test server: small, so a few jobs span several pages.
const PAGE_BOUND: usize = 5;
const JOBS: usize = 12;

/// Starts a one-replica server on `rt` with a node and a queue, holding `JOBS` jobs.
fn server_with_jobs(rt: &tokio::runtime::Runtime, dir: &std::path::Path) -> String {
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let config = ServerConfig {
            replica: ReplicaConfig::new(1, "pages", addr.clone(), dir),
            bootstrap: Some(BTreeMap::from([(1, addr.clone())])),
            settings: ServerSettings {
                max_list_jobs: PAGE_BOUND,
                auth: baton_server::auth::AuthMode::None,
                ..ServerSettings::default()
            },
            scheduler: None,
            transport: baton_proto::tls::Transport::Insecure,
        };
        tokio::spawn(async move { baton_server::run(config, listener, std::future::pending()).await.unwrap() });
        let mut api = BatonClient::connect(format!("http://{addr}")).await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while api.put_queue(gpu_queue("q", 8)).await.is_err() {
            assert!(tokio::time::Instant::now() < deadline, "the replica did not start leading");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        attach_node(&addr, deadline).await;
        for i in 0..JOBS {
            let spec = gpu_job(&format!("job-{i}"), "q", "train", 1, 1, vec!["true".into()]);
            api.submit(SubmitRequest {
                spec: Some(spec),
                request_id: String::new(),
                run_as: String::new(),
                after: Vec::new(),
                array: None,
            })
            .await
            .unwrap();
        }
        addr
    })
}

/// Registers a node (the agent's stream is kept open by a task of its own).
async fn attach_node(addr: &str, deadline: tokio::time::Instant) {
    let mut gw = AgentGatewayClient::connect(format!("http://{addr}")).await.unwrap();
    let node = NodeInfo {
        name: "n1".into(),
        pool: "default".into(),
        resources: [("gpu".to_string(), 8)].into(),
        ..Default::default()
    };
    loop {
        match gw.attach(AttachRequest { node: Some(node.clone()), term_seen: 0 }).await {
            Ok(stream) => {
                let mut stream = stream.into_inner();
                tokio::spawn(async move { while let Ok(Some(_)) = stream.message().await {} });
                return;
            }
            Err(s) => {
                assert!(tokio::time::Instant::now() < deadline, "attach refused: {s:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[test]
fn list_follows_pages_until_every_job_is_listed() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let addr = server_with_jobs(&rt, dir.path());
    let (r, out) = run(&["list", "--server", &addr]);
    r.unwrap();
    for i in 0..JOBS {
        assert!(out.contains(&format!("job-{i} ")), "job-{i} missing from:\n{out}");
    }
    assert!(!out.contains("more jobs"), "nothing is left out: {out}");
    // --limit still bounds the whole listing, across pages.
    let (r, out) = run(&["list", "--server", &addr, "--limit", "7"]);
    r.unwrap();
    assert_eq!((0..JOBS).filter(|i| out.contains(&format!("job-{i} "))).count(), 7, "{out}");
}

#[test]
fn a_page_over_the_bound_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let addr = server_with_jobs(&rt, dir.path());
    rt.block_on(async {
        let mut api = BatonClient::connect(format!("http://{addr}")).await.unwrap();
        let ask = ListJobsRequest { page_size: PAGE_BOUND as u32 + 1, ..Default::default() };
        let s = api.list_jobs(ask).await.unwrap_err();
        assert_eq!(s.code(), tonic::Code::InvalidArgument, "{s:?}");
        assert!(s.message().contains("page_size") && s.message().contains(&PAGE_BOUND.to_string()), "{s:?}");
        // A bad token is named too.
        let ask = ListJobsRequest { page_token: "x".into(), ..Default::default() };
        let s = api.list_jobs(ask).await.unwrap_err();
        assert!(s.message().contains("page_token"), "{s:?}");
    });
}

/// Every reply a server may send (up to the shared bound) decodes in the client. Without
/// the shared bound the client kept tonic's default and refused this reply: "decoded message
/// length too large: found 14681468 bytes, the limit is: 4194304 bytes".
#[test]
fn a_reply_near_the_shared_bound_decodes() {
    // Fourteen jobs of about 1 MiB each: well over 4 MiB, under the shared 16 MiB bound.
    let fake = fake::Fake::with(|s| {
        for i in 0..14 {
            let mut j = fake::job(i + 1, &format!("big-{i}"), "q", "Pending", &[]);
            j.spec.as_mut().unwrap().env.insert("BLOB".into(), "x".repeat(1 << 20));
            s.jobs.push(j);
        }
    });
    let server = fake::serve_baton(fake);
    let (r, out) = run(&["list", "--server", &server.addr()]);
    r.unwrap();
    assert!((0..14).all(|i| out.contains(&format!("big-{i} "))), "{out}");
}
