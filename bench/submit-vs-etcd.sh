#!/bin/sh
# Durable submissions/s of baton next to etcd 3.4 puts/s, on this machine, same clients.
#
# 1. `baton bench submit` starts 3 baton replicas on loopback, runs the load, stops them.
# 2. This script starts a 3-member etcd cluster on loopback (data in a temporary directory),
#    runs `baton bench submit --etcd` with the same clients, seconds and payloads (each put's
#    value is the encoded submit), and stops etcd again, on success or failure.
#
# Usage: bench/submit-vs-etcd.sh [CLIENTS] [SECONDS]      (defaults: 64 clients, 10 s)
# BATON: the baton binary (default: target/release/baton, else `baton` on PATH).
# ETCD: the etcd binary (default: `etcd` on PATH; Debian: apt-get install etcd-server).
set -eu

clients=${1:-64}
seconds=${2:-10}
etcd=${ETCD:-etcd}
baton=${BATON:-}
if [ -z "$baton" ]; then
    if [ -x target/release/baton ]; then baton=target/release/baton; else baton=baton; fi
fi

if ! command -v "$etcd" >/dev/null 2>&1; then
    echo "error: etcd is not installed (no '$etcd' on PATH): install etcd 3.4, e.g." >&2
    echo "       apt-get install etcd-server   (Debian), or set ETCD=/path/to/etcd" >&2
    exit 2
fi
if ! command -v "$baton" >/dev/null 2>&1; then
    echo "error: no baton binary at '$baton': build it with 'cargo build --release -p baton-cli'" >&2
    echo "       or set BATON=/path/to/baton" >&2
    exit 2
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/submit-vs-etcd.XXXXXX")
pids=""
stop() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    for p in $pids; do wait "$p" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap stop EXIT INT TERM

echo "== machine: $(nproc) CPUs, $(uname -sr); $("$etcd" --version | head -1)"
echo "== baton: 3 replicas, $clients clients, $seconds s"
"$baton" bench submit --clients "$clients" --seconds "$seconds"

# etcd: 3 members on loopback, client ports 23790-23792, peer ports 23800-23802.
cluster="e1=http://127.0.0.1:23800,e2=http://127.0.0.1:23801,e3=http://127.0.0.1:23802"
for i in 0 1 2; do
    "$etcd" --name "e$((i + 1))" --data-dir "$dir/e$i" \
        --listen-client-urls "http://127.0.0.1:2379$i" --advertise-client-urls "http://127.0.0.1:2379$i" \
        --listen-peer-urls "http://127.0.0.1:2380$i" --initial-advertise-peer-urls "http://127.0.0.1:2380$i" \
        --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token bench \
        >"$dir/e$i.log" 2>&1 &
    pids="$pids $!"
done
endpoints="127.0.0.1:23790,127.0.0.1:23791,127.0.0.1:23792"
# Ready once a put is committed (etcdctl, when present; else give the members a few seconds).
if command -v etcdctl >/dev/null 2>&1; then
    tries=0
    until ETCDCTL_API=3 etcdctl --endpoints "$endpoints" put /ready 1 >/dev/null 2>&1; do
        tries=$((tries + 1))
        if [ "$tries" -gt 100 ]; then
            echo "error: etcd did not come up; its logs:" >&2
            tail -n 5 "$dir"/e*.log >&2
            exit 1
        fi
        sleep 0.1
    done
else
    sleep 5
fi
echo "== etcd: 3 members, $clients clients, $seconds s"
"$baton" bench submit --clients "$clients" --seconds "$seconds" --etcd "$endpoints"
