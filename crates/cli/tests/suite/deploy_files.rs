//! The deployment files (compose, Kubernetes, systemd) start `baton server` and `baton agent`
//! with flags: each flag they use must exist on the command, and every file must give the
//! same ports, so that a renamed flag or a moved port breaks this test instead of a deployment.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use baton_cli::agent::AgentArgs;
use baton_cli::server::ServerArgs;
use clap::Args;
use yaml_rust2::{Yaml, YamlLoader};

const SERVER_PORT: &str = "7070";
const AGENT_LOGS_PORT: &str = "7080";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn long_flags<A: Args>(name: &'static str) -> BTreeSet<String> {
    let cmd = A::augment_args(clap::Command::new(name));
    cmd.get_arguments().filter_map(|a| a.get_long()).map(|l| format!("--{l}")).collect()
}

/// One invocation found in a file: where, which command, its arguments after the command,
/// and (Kubernetes) the container's environment: a variable's value, or `fieldRef:PATH`
/// for one read through the downward API.
struct Invocation {
    file: String,
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
}

/// `[init, --, /usr/local/bin/baton, agent, ...]` and `[server, ...]` both name their command;
/// the words after it are its arguments.
fn invocation(file: &str, words: &[String]) -> Option<Invocation> {
    let at = words.iter().position(|w| w == "server" || w == "agent")?;
    Some(Invocation {
        file: file.into(),
        command: words[at].clone(),
        args: words[at + 1..].to_vec(),
        env: BTreeMap::new(),
    })
}

fn container_env(c: &Yaml) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for e in c["env"].as_vec().into_iter().flatten() {
        let name = e["name"].as_str().expect("an env entry without a name").to_string();
        let value = match (e["value"].as_str(), e["valueFrom"]["fieldRef"]["fieldPath"].as_str()) {
            (Some(v), _) => v.to_string(),
            (None, Some(path)) => format!("fieldRef:{path}"),
            _ => String::new(),
        };
        env.insert(name, value);
    }
    env
}

fn strings(y: &Yaml) -> Vec<String> {
    y.as_vec().map(|v| v.iter().filter_map(|w| w.as_str().map(String::from)).collect()).unwrap_or_default()
}

/// The compose files: the cluster, and the override for hosts with cgroup v2.
const COMPOSE_FILES: [&str; 2] = ["deploy/compose.yaml", "deploy/compose.cgroup.yaml"];

/// The services of compose file `file`, by name.
fn compose_services(file: &str) -> Vec<(String, Yaml)> {
    let docs = YamlLoader::load_from_str(&read(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let services = docs[0]["services"].as_hash().unwrap_or_else(|| panic!("{file} has no services"));
    services.iter().map(|(k, v)| (k.as_str().unwrap_or_default().to_string(), v.clone())).collect()
}

fn compose_invocations() -> Vec<Invocation> {
    COMPOSE_FILES
        .iter()
        .flat_map(|file| {
            compose_services(file).into_iter().filter_map(|(_, s)| invocation(file, &strings(&s["command"])))
        })
        .collect()
}

fn kubernetes_invocations() -> Vec<Invocation> {
    let mut found = Vec::new();
    for file in ["deploy/kubernetes/replicas.yaml", "deploy/kubernetes/agents.yaml"] {
        for doc in YamlLoader::load_from_str(&read(file)).expect("manifest parses") {
            for c in doc["spec"]["template"]["spec"]["containers"].as_vec().into_iter().flatten() {
                found.extend(invocation(file, &strings(&c["args"])).map(|i| Invocation { env: container_env(c), ..i }));
            }
        }
    }
    found
}

fn systemd_invocations() -> Vec<Invocation> {
    let mut found = Vec::new();
    for file in ["deploy/systemd/baton-server.service", "deploy/systemd/baton-agent.service"] {
        let text = read(file);
        let line = text.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("ExecStart");
        let words: Vec<String> = line.split_whitespace().map(String::from).collect();
        found.extend(invocation(file, &words));
    }
    found
}

fn all_invocations() -> Vec<Invocation> {
    let mut all = compose_invocations();
    all.extend(kubernetes_invocations());
    all.extend(systemd_invocations());
    all
}

fn value_of<'a>(inv: &'a Invocation, flag: &str) -> Option<&'a str> {
    let at = inv.args.iter().position(|a| a == flag)?;
    inv.args.get(at + 1).map(String::as_str)
}

#[test]
fn every_flag_in_a_deployment_file_exists_on_its_command() {
    let server = long_flags::<ServerArgs>("server");
    let agent = long_flags::<AgentArgs>("agent");
    let all = all_invocations();
    for kind in ["server", "agent"] {
        for file in ["compose.yaml", "kubernetes", "systemd"] {
            let n = all.iter().filter(|i| i.command == kind && i.file.contains(file)).count();
            assert!(n > 0, "no `baton {kind}` found in deploy/{file}: the test would check nothing");
        }
    }
    for inv in &all {
        let known = if inv.command == "server" { &server } else { &agent };
        for flag in inv.args.iter().filter(|a| a.starts_with("--")) {
            assert!(known.contains(flag), "{}: `baton {} {flag}` is not a flag of the command", inv.file, inv.command);
        }
    }
}

/// systemd files give addresses through the environment file; the others inline.
fn address(inv: &Invocation, flag: &str) -> String {
    let value = value_of(inv, flag).unwrap_or_else(|| panic!("{}: `baton {}` has no {flag}", inv.file, inv.command));
    let Some(var) = value.strip_prefix("${").and_then(|v| v.strip_suffix('}')) else { return value.to_string() };
    let env_file =
        if inv.command == "server" { "deploy/systemd/server.env.example" } else { "deploy/systemd/agent.env.example" };
    read(env_file)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{var}=")).map(String::from))
        .unwrap_or_else(|| panic!("{env_file} does not set {var}, which {} uses", inv.file))
}

#[test]
fn every_deployment_listens_on_the_same_ports() {
    for inv in all_invocations() {
        let (flag, port) =
            if inv.command == "server" { ("--listen", SERVER_PORT) } else { ("--listen", AGENT_LOGS_PORT) };
        let addr = address(&inv, flag);
        assert!(
            addr.ends_with(&format!(":{port}")),
            "{}: `baton {}` listens on {addr}, not port {port}",
            inv.file,
            inv.command
        );
    }
    let dockerfile = read("deploy/Dockerfile");
    assert!(
        dockerfile.contains(&format!("EXPOSE {SERVER_PORT} {AGENT_LOGS_PORT}")),
        "deploy/Dockerfile exposes other ports"
    );
}

#[test]
fn every_replica_is_in_the_first_membership_it_is_given() {
    for inv in all_invocations().iter().filter(|i| i.command == "server" && !i.file.contains("systemd")) {
        let members = baton_cli::server::parse_members(value_of(inv, "--bootstrap").expect("--bootstrap")).unwrap();
        // Every deployment runs raft on a peer port: members are API/PEER.
        let api = value_of(inv, "--advertise").expect("--advertise");
        let peer = value_of(inv, "--peer-advertise").expect("--peer-advertise");
        // Kubernetes advertises $(POD_NAME)...: any member of that shape is this pod.
        let same = |member: &str, advertised: &str| {
            member == advertised
                || (advertised.contains("$(POD_NAME)") && member.ends_with(&advertised.replace("$(POD_NAME)", "")))
        };
        assert!(
            members.values().map(|m| baton_raft::Addrs::parse(m)).any(|m| same(&m.api, api) && same(&m.peer, peer)),
            "{}: replica advertising {api} (peer {peer}) is not in --bootstrap {members:?}",
            inv.file
        );
    }
}

/// `host:port` of every compose service that serves /metrics (`--metrics-listen`).
fn compose_metrics_targets() -> BTreeSet<String> {
    let docs = YamlLoader::load_from_str(&read("deploy/compose.yaml")).expect("compose.yaml parses");
    let services = docs[0]["services"].as_hash().expect("compose.yaml has services");
    let mut targets = BTreeSet::new();
    for (name, s) in services {
        let words = strings(&s["command"]);
        if let Some(at) = words.iter().position(|w| w == "--metrics-listen") {
            let port = words[at + 1].rsplit(':').next().unwrap().to_string();
            targets.insert(format!("{}:{port}", name.as_str().unwrap()));
        }
    }
    targets
}

#[test]
fn prometheus_scrapes_every_replica_and_agent_of_the_compose_file_and_nothing_else() {
    let compose = compose_metrics_targets();
    assert_eq!(compose.len(), 5, "every replica and agent serves /metrics: {compose:?}");
    let docs = YamlLoader::load_from_str(&read("deploy/monitoring/prometheus.yml")).expect("prometheus.yml parses");
    let mut scraped = BTreeSet::new();
    for job in docs[0]["scrape_configs"].as_vec().expect("scrape_configs") {
        // Issue 39: the metrics listeners are mutual TLS, so a scrape presents a certificate.
        assert_eq!(job["scheme"].as_str(), Some("https"), "{job:?}");
        assert_eq!(job["tls_config"]["cert_file"].as_str(), Some("/tls/cert.pem"), "{job:?}");
        for sc in job["static_configs"].as_vec().expect("static_configs") {
            scraped.extend(strings(&sc["targets"]));
        }
    }
    assert_eq!(scraped, compose, "deploy/monitoring/prometheus.yml and deploy/compose.yaml disagree");
    assert!(read("deploy/compose.yaml").contains(r#"--clients, "admin,prometheus""#), "no certificate for Prometheus");
    assert!(read("deploy/compose.monitoring.yaml").contains("./tls/client-prometheus:/tls:ro"));
}

/// The metric names a PromQL expression reads (histogram series by their base name).
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (at, _) in expr.match_indices("baton_") {
        let name: String =
            expr[at..].chars().take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit()).collect();
        let base = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(&name);
        names.push(base.to_string());
    }
    names
}

#[test]
fn the_grafana_dashboard_reads_only_documented_metrics() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("deploy/monitoring/grafana-dashboard.json")).expect("the dashboard is JSON");
    let documented = read("docs/metrics.md");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10, "{} panels", panels.len());
    let mut ids = BTreeSet::new();
    let mut read_metrics = BTreeSet::new();
    for p in panels {
        assert!(ids.insert(p["id"].as_u64().expect("a panel id")), "panel id {} twice", p["id"]);
        assert!(p["title"].as_str().is_some_and(|t| !t.is_empty()), "a panel without a title");
        for t in p["targets"].as_array().expect("targets") {
            let expr = t["expr"].as_str().expect("expr");
            for name in metric_names(expr) {
                assert!(documented.contains(&format!("`{name}`")), "{expr}: {name} is not in docs/metrics.md");
                read_metrics.insert(name);
            }
        }
    }
    for needed in
        ["baton_queue_gpus_used", "baton_queue_pending_jobs", "baton_preemptions_total", "baton_job_wait_seconds"]
    {
        assert!(read_metrics.contains(needed), "the dashboard shows no {needed}");
    }
}

#[test]
fn metric_names_are_read_from_promql() {
    let names =
        metric_names("histogram_quantile(0.5, sum by (le) (rate(baton_job_wait_seconds_bucket[5m]))) / baton_x");
    assert_eq!(names, ["baton_job_wait_seconds", "baton_x"]);
}

/// `baton agent` refuses to start without being told who jobs run as; every deployment says it.
#[test]
fn every_agent_says_who_its_jobs_run_as() {
    let agents: Vec<Invocation> = all_invocations().into_iter().filter(|i| i.command == "agent").collect();
    assert!(!agents.is_empty());
    for inv in &agents {
        let says = inv.args.iter().any(|a| a == "--run-as-self" || a == "--run-as-allow");
        assert!(says, "{}: `baton agent` needs --run-as-allow USERS or --run-as-self", inv.file);
    }
}

/// Issue 39: the Kubernetes agents ran every job as the container's root (`--run-as-self`),
/// beside the node's key and the agent's data. No shipped deployment does: jobs run as their
/// submitters.
#[test]
fn no_deployment_runs_jobs_as_the_agents_own_user() {
    for inv in all_invocations().into_iter().filter(|i| i.command == "agent") {
        assert!(
            !inv.args.iter().any(|a| a == "--run-as-self"),
            "{}: jobs would run as the agent's own user; use --run-as-allow USERS",
            inv.file
        );
    }
}

/// Issue 31: the weaker containment is taken only when named, so every shipped agent says
/// which it wants (the default, `cgroup`, refuses to start without a delegated tree).
#[test]
fn every_agent_names_its_containment() {
    for inv in all_invocations().into_iter().filter(|i| i.command == "agent") {
        let named = value_of(&inv, "--containment").or(inv.env.get("BATON_CONTAINMENT").map(String::as_str));
        let mode = named.unwrap_or_else(|| panic!("{}: `baton agent` names no --containment", inv.file));
        assert!(baton_agent::cgroup::ContainmentMode::parse(mode).is_ok(), "{}: --containment {mode}", inv.file);
    }
}

/// Issue 31: an agent asked for a cgroup per replica refuses to start without a writable
/// cgroup v2 tree, so each deployment that asks for one must hand it one: a privileged
/// container (Docker and Kubernetes mount the container's cgroup tree read-only otherwise),
/// or systemd's `Delegate=yes`. And each deployment has such an agent.
#[test]
fn every_agent_asked_for_a_cgroup_per_replica_is_given_a_writable_tree() {
    let cgroup = |args: &[String]| args.windows(2).any(|w| w[0] == "--containment" && w[1] == "cgroup");
    let mut given = BTreeSet::new();
    for file in COMPOSE_FILES {
        for (name, s) in compose_services(file).into_iter().filter(|(_, s)| cgroup(&strings(&s["command"]))) {
            assert_eq!(s["privileged"].as_bool(), Some(true), "{file}: {name} asks for cgroups but is not privileged");
            given.insert(file.to_string());
        }
    }
    for doc in YamlLoader::load_from_str(&read("deploy/kubernetes/agents.yaml")).expect("manifest parses") {
        for c in doc["spec"]["template"]["spec"]["containers"].as_vec().into_iter().flatten() {
            if cgroup(&strings(&c["args"])) {
                assert_eq!(c["securityContext"]["privileged"].as_bool(), Some(true), "agents.yaml: not privileged");
                given.insert("deploy/kubernetes/agents.yaml".to_string());
            }
        }
    }
    let unit = read("deploy/systemd/baton-agent.service");
    if unit.lines().any(|l| l.starts_with("ExecStart=") && l.contains("--containment cgroup")) {
        assert!(unit.lines().any(|l| l.trim() == "Delegate=yes"), "baton-agent.service: no Delegate=yes");
        given.insert("deploy/systemd/baton-agent.service".to_string());
    }
    let expected: BTreeSet<String> =
        ["deploy/compose.cgroup.yaml", "deploy/kubernetes/agents.yaml", "deploy/systemd/baton-agent.service"]
            .map(String::from)
            .into();
    assert_eq!(given, expected, "the deployments with a cgroup per replica");
}

/// deploy/compose.cgroup.yaml repeats the agents' commands of deploy/compose.yaml (compose
/// replaces a command whole): they must stay the same but for `--containment`.
#[test]
fn the_cgroup_override_runs_the_compose_agents_but_for_their_containment() {
    let base: BTreeMap<String, Vec<String>> = compose_services("deploy/compose.yaml")
        .into_iter()
        .filter(|(_, s)| strings(&s["command"]).iter().any(|w| w == "agent"))
        .map(|(name, s)| (name, strings(&s["command"])))
        .collect();
    let over: BTreeMap<String, Vec<String>> = compose_services("deploy/compose.cgroup.yaml")
        .into_iter()
        .map(|(name, s)| (name, strings(&s["command"])))
        .collect();
    assert_eq!(base.keys().collect::<Vec<_>>(), over.keys().collect::<Vec<_>>(), "the override's services");
    for (name, words) in &base {
        let expected: Vec<String> =
            words.iter().map(|w| if w == "auto" { "cgroup".into() } else { w.clone() }).collect();
        assert_eq!(&over[name], &expected, "{name}: the override's command drifted from compose.yaml's");
    }
}

/// The pod label a Kubernetes replica's rack is read from must be the one its anti-affinity
/// spreads the replicas over: `cluster info` then shows the failure domains the scheduler
/// actually kept apart.
fn replica_spread_key() -> String {
    let docs = YamlLoader::load_from_str(&read("deploy/kubernetes/replicas.yaml")).expect("manifest parses");
    let set = docs.iter().find(|d| d["kind"].as_str() == Some("StatefulSet")).expect("a StatefulSet");
    let terms = &set["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    terms[0]["topologyKey"].as_str().expect("a required anti-affinity with a topologyKey").to_string()
}

/// The rack an invocation gives, resolved: a literal, a systemd environment file's value,
/// or a Kubernetes variable set from the downward API (`fieldRef:PATH`).
fn rack(inv: &Invocation) -> String {
    let value =
        value_of(inv, "--rack").unwrap_or_else(|| panic!("{}: `baton {}` has no --rack", inv.file, inv.command));
    match value.strip_prefix("$(").and_then(|v| v.strip_suffix(')')) {
        Some(var) => inv
            .env
            .get(var)
            .cloned()
            .unwrap_or_else(|| panic!("{}: --rack uses $({var}), which the container does not set", inv.file)),
        None => address(inv, "--rack"),
    }
}

/// Every replica and every agent says which rack it is in, in every deployment: replicas so
/// that `cluster info` shows whether losing a rack keeps a quorum, agents for rack-aware
/// placement.
#[test]
fn every_replica_and_agent_is_given_its_rack() {
    let spread = replica_spread_key();
    for inv in all_invocations() {
        let rack = rack(&inv);
        match rack.strip_prefix("fieldRef:") {
            Some(path) => {
                let label = format!("metadata.labels['{spread}']");
                assert_eq!(
                    path, label,
                    "{}: `baton {}` reads its rack from {path}, not the label the replicas are spread over",
                    inv.file, inv.command
                );
            }
            None => {
                if let Err(e) = baton_cli::server::parse_rack(&rack) {
                    panic!("{}: `baton {}` --rack {rack:?}: {e}", inv.file, inv.command);
                }
            }
        }
    }
}

/// The compose file hands no replica or agent (and so no job) the cluster's CA key or another
/// process's key: only the one-shot `certs` step mounts the whole `./tls` tree; every replica
/// and agent mounts its own certificate directory of it, read-only. Before, every agent
/// mounted `./tls` whole and ran jobs as root (`--run-as-self`): a job could read
/// `/tls/ca/ca.key` and mint any certificate.
#[test]
fn compose_mounts_each_process_only_its_own_certificate_directory() {
    let docs = YamlLoader::load_from_str(&read("deploy/compose.yaml")).expect("compose.yaml parses");
    let services = docs[0]["services"].as_hash().expect("compose.yaml has services");
    let mut checked = 0;
    for (name, s) in services {
        let name = name.as_str().expect("a service name");
        let Some(inv) = invocation("deploy/compose.yaml", &strings(&s["command"])) else { continue };
        let tls_mounts: Vec<String> = strings(&s["volumes"]).into_iter().filter(|v| v.starts_with("./tls")).collect();
        assert_eq!(tls_mounts.len(), 1, "{name}: one certificate mount, got {tls_mounts:?}");
        let (host, rest) = tls_mounts[0].split_once(':').expect("HOST:CONTAINER");
        let own = host.strip_prefix("./tls/").unwrap_or_else(|| panic!("{name} mounts all of ./tls: {host}"));
        assert!(!own.is_empty() && !own.contains('/') && own != "ca", "{name} mounts {host}");
        assert!(rest.ends_with(":ro"), "{name}: its certificates are mounted read-only ({rest})");
        if inv.command == "agent" {
            assert!(!inv.args.iter().any(|a| a == "--run-as-self"), "{name} runs jobs as its own user (root)");
        }
        checked += 1;
    }
    assert_eq!(checked, 5, "three replicas and two agents");
}

/// Each Kubernetes replica mounts only its own certificate and key: a StatefulSet of its own
/// (one pod), whose `--id` names the replica its Secret holds, the Secret mounted whole (no
/// items picking other replicas' files). Before, one StatefulSet of three pods mounted one
/// Secret with all three replicas' keys into every pod.
#[test]
fn each_kubernetes_replica_mounts_only_its_own_key() {
    let docs = YamlLoader::load_from_str(&read("deploy/kubernetes/replicas.yaml")).expect("manifest parses");
    let sets: Vec<&Yaml> = docs.iter().filter(|d| d["kind"].as_str() == Some("StatefulSet")).collect();
    assert_eq!(sets.len(), 3, "one StatefulSet per replica");
    let mut secrets = BTreeSet::new();
    for set in sets {
        let name = set["metadata"]["name"].as_str().expect("a name");
        assert_eq!(set["spec"]["replicas"].as_i64(), Some(1), "{name}: one pod, so one key");
        let pod = &set["spec"]["template"]["spec"];
        let args = strings(&pod["containers"][0]["args"]);
        let inv = invocation("deploy/kubernetes/replicas.yaml", &args).expect("a baton command");
        let id = value_of(&inv, "--id").expect("--id");
        let volumes = pod["volumes"].as_vec().expect("volumes");
        let tls = volumes.iter().find(|v| v["name"].as_str() == Some("tls")).expect("a tls volume");
        let secret = tls["secret"]["secretName"].as_str().expect("a Secret");
        assert_eq!(secret, format!("baton-replica-{id}-tls"), "{name}: replica {id} mounts {secret}");
        assert!(tls["secret"]["items"].is_badvalue(), "{name}: items pick files of one Secret for several replicas");
        assert_eq!(value_of(&inv, "--tls-dir"), Some("/tls"), "{name}");
        secrets.insert(secret.to_string());
    }
    assert_eq!(secrets.len(), 3, "each replica its own Secret: {secrets:?}");
}
