#!/usr/bin/env bash
# Prints one line per simulation (name, sha256 of its output) so that a change meant to keep
# every scheduling decision can be checked: run it before and after, and diff the two.
#
#   bench/sim-fingerprint.sh target/release/baton [EXTRA_SCENARIO_DIR...] > before.txt
#   ... change, rebuild ...
#   bench/sim-fingerprint.sh target/release/baton [EXTRA_SCENARIO_DIR...] > after.txt
#   diff before.txt after.txt
#
# Covers: `baton sim -o json` of every scenario file of tests/scenarios, examples/scenarios,
# crates/sim/tests/regressions and the extra directories; trace reports (`-o json`) of a
# 10,000-job trace on cluster-1000.yaml, a contended 3,000-job trace (load 1.5) on
# cluster-4x8.yaml and starving-gang.csv, each with reservations on (300 s) and off; and
# the full decision log (BATON_TRACE=1) of the contended 3,000-job trace, on and off.
set -euo pipefail
baton=${1:?usage: sim-fingerprint.sh BATON_BINARY [EXTRA_SCENARIO_DIR...]}
shift
cd "$(dirname "$0")/.."
h() { sha256sum | cut -c1-16; }
for f in tests/scenarios/*.yaml examples/scenarios/*.yaml crates/sim/tests/regressions/*.yaml; do
    [ -e "$f" ] || continue
    echo "$f $("$baton" sim -o json "$f" 2>&1 | h)"
done
for d in "$@"; do
    for f in "$d"/*.yaml; do
        echo "$(basename "$d")/$(basename "$f") $("$baton" sim -o json "$f" 2>&1 | h)"
    done
done
c1000=examples/traces/cluster-1000.yaml
c4x8=examples/traces/cluster-4x8.yaml
for ra in 300 never; do
    echo "trace 10k cluster-1000 reserve_after=$ra $("$baton" sim trace --cluster $c1000 --generate 10000 --seed 1 --reserve-after $ra -o json 2>&1 | h)"
    echo "trace 3k cluster-4x8 load 1.5 reserve_after=$ra $("$baton" sim trace --cluster $c4x8 --generate 3000 --seed 1 --load 1.5 --reserve-after $ra -o json 2>&1 | h)"
    echo "trace starving-gang reserve_after=$ra $("$baton" sim trace --cluster $c4x8 --trace examples/traces/starving-gang.csv --reserve-after $ra -o json 2>&1 | h)"
    log=$(BATON_TRACE=1 "$baton" sim trace --cluster $c4x8 --generate 3000 --seed 1 --load 1.5 --reserve-after $ra -o json 2>&1 >/dev/null | grep '^TRACE ')
    echo "decisions 3k cluster-4x8 load 1.5 reserve_after=$ra $(printf '%s\n' "$log" | wc -l) $(printf '%s\n' "$log" | h)"
done
