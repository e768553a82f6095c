//! GPU health on a real agent (decisions.md section 14), without a GPU: a fault injected
//! into a development GPU reaches the leader as an observation and counts on /metrics; the
//! operator's health check fails the GPUs it names, and, allowed to, clears them when it
//! passes again; a fault the leader has not acknowledged survives a restart of the agent.

use crate::common;

use std::time::Duration;

use baton_agent::health::HealthCheck;
use baton_proto::v1::GpuHealth;
use baton_proto::v1::observation::What;
use common::*;

fn gpu_reports(gw: &Gateway) -> Vec<GpuHealth> {
    gw.observations()
        .into_iter()
        .filter_map(|o| match o.what {
            Some(What::Gpu(g)) => Some(g),
            _ => None,
        })
        .collect()
}

fn inject(dir: &std::path::Path, gpu: u32, error: &str) {
    let faults = baton_agent::health::injected::dir(dir);
    let tmp = dir.join(format!("fault-{gpu}.tmp"));
    std::fs::write(&tmp, error).unwrap();
    std::fs::rename(&tmp, faults.join(gpu.to_string())).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_fault_reaches_the_leader_and_counts_on_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    gw.grant_lease_ms(5_000);
    let mut c = config(dir.path(), &[gw.addr]);
    c.metrics_listen = Some("127.0.0.1:0".into());
    let agent = start_agent(c).await;
    inject(dir.path(), 2, "XID 79\n");
    inject(dir.path(), 9, "XID 79");
    let got = wait_for(5, "the fault reported", || {
        let r = gpu_reports(&gw);
        (!r.is_empty()).then_some(r)
    })
    .await;
    let want = GpuHealth { gpu: 2, healthy: false, error: "XID 79".into(), by_check: false };
    assert_eq!(got, vec![want], "GPU 9 is not on this node (4 GPUs): dropped");
    let metrics = scrape_reply(agent.metrics_addr().unwrap()).await;
    assert!(metrics.contains("baton_agent_gpu_faults_total{gpu=\"2\"} 1"), "{metrics}");
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_check_fails_the_gpus_it_names_and_clears_them_when_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    gw.grant_lease_ms(5_000);
    let broken = dir.path().join("broken");
    std::fs::write(&broken, "").unwrap();
    let mut c = config(dir.path(), &[gw.addr]);
    let command = format!("if [ -e {0} ]; then echo 'gpu 1: dcgmi diag failed'; exit 1; fi", broken.display());
    c.health_check = Some(HealthCheck { command, interval_ms: 100, timeout_ms: 2_000, clears: true });
    let agent = start_agent(c).await;
    wait_for(5, "the failed check reported", || (!gpu_reports(&gw).is_empty()).then_some(())).await;
    std::fs::remove_file(&broken).unwrap();
    wait_for(5, "the passing check reported", || (gpu_reports(&gw).len() >= 2).then_some(())).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let want = vec![
        GpuHealth { gpu: 1, healthy: false, error: "health check: dcgmi diag failed".into(), by_check: true },
        GpuHealth { gpu: 1, healthy: true, error: String::new(), by_check: true },
    ];
    assert_eq!(gpu_reports(&gw), want, "each change once, not at every run");
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_not_yet_acknowledged_is_sent_by_the_restarted_agent() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(None).await;
    gw.stall_reports(true);
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    inject(dir.path(), 1, "uncorrectable ECC errors: 2");
    let file = baton_agent::health::injected::dir(dir.path()).join("1");
    wait_for(5, "the fault read", || (!file.exists()).then_some(())).await;
    // Journaled right after it is read; give the thread that moment.
    tokio::time::sleep(Duration::from_millis(300)).await;
    agent.shutdown().await.unwrap();
    assert!(gpu_reports(&gw).is_empty(), "no report got through");
    gw.stall_reports(false);
    let agent = start_agent(config(dir.path(), &[gw.addr])).await;
    let got = wait_for(5, "the fault reported after the restart", || {
        let r = gpu_reports(&gw);
        (!r.is_empty()).then_some(r)
    })
    .await;
    assert_eq!(
        got[0],
        GpuHealth { gpu: 1, healthy: false, error: "uncorrectable ECC errors: 2".into(), by_check: false }
    );
    agent.shutdown().await.unwrap();
}
