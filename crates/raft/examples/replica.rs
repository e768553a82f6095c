//! One replica as its own process, for the fail-over benchmark (and for trying a cluster by
//! hand).
//!
//! ```text
//! replica --id 1 --cluster bench --addr 127.0.0.1:7001 --dir /tmp/r1 \
//!         [--bootstrap 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003]
//! ```
//!
//! It serves until it is killed or gets Ctrl-C.

use std::collections::BTreeMap;
use std::process::ExitCode;

use baton_raft::replica::{Replica, ReplicaConfig};

struct Args {
    id: u64,
    cluster: String,
    addr: String,
    dir: String,
    bootstrap: Option<BTreeMap<u64, String>>,
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let (mut id, mut cluster, mut addr, mut dir, mut bootstrap) = (None, None, None, None, None);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--id" => id = Some(value.parse::<u64>().map_err(|e| format!("--id: {e}"))?),
            "--cluster" => cluster = Some(value),
            "--addr" => addr = Some(value),
            "--dir" => dir = Some(value),
            "--bootstrap" => {
                let mut members = BTreeMap::new();
                for m in value.split(',') {
                    let (i, a) = m.split_once('=').ok_or_else(|| format!("--bootstrap: {m:?} is not ID=HOST:PORT"))?;
                    let i = i.parse::<u64>().map_err(|e| format!("--bootstrap {m:?}: {e}"))?;
                    members.insert(i, a.to_string());
                }
                bootstrap = Some(members);
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(Args {
        id: id.ok_or("--id is required")?,
        cluster: cluster.ok_or("--cluster is required")?,
        addr: addr.ok_or("--addr is required")?,
        dir: dir.ok_or("--dir is required")?,
        bootstrap,
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("replica: {e}");
            return ExitCode::from(2);
        }
    };
    let listener = match tokio::net::TcpListener::bind(&args.addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("replica: cannot listen on {}: {e}", args.addr);
            return ExitCode::FAILURE;
        }
    };
    let config = ReplicaConfig::new(args.id, args.cluster, args.addr, args.dir);
    let replica = match Replica::open(config).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("replica: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(members) = args.bootstrap {
        if let Err(e) = replica.bootstrap(members).await {
            eprintln!("replica: bootstrap: {e}");
            return ExitCode::FAILURE;
        }
    }
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    if let Err(e) = replica.run(listener, stop).await {
        eprintln!("replica: {e}");
        return ExitCode::FAILURE;
    }
    replica.shutdown().await;
    ExitCode::SUCCESS
}
