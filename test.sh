#!/usr/bin/env bash
# The README's test command. It installs what the tests need where it can (Debian packages,
# as root or through passwordless sudo), runs every test of the workspace, and names each
# test it could not run here and why; it never counts a test it did not run as passed.
#
# Tests that need something beyond the Rust toolchain are marked `#[ignore = "needs ..."]`, so
# a plain `cargo test --workspace` lists them as ignored with that reason. This script runs
# them in a second pass, each group only where what it needs is here.
#
# Usage: ./test.sh [--no-install] [--strict]
#   --no-install   install nothing; groups whose needs are missing are reported skipped.
#   --strict       a skipped test fails the run (CI: every test must run there).
set -uo pipefail
cd "$(dirname "$0")"

install=1
strict=0
for arg in "$@"; do
  case "$arg" in
    --no-install) install=0 ;;
    --strict) strict=1 ;;
    *) echo "usage: ./test.sh [--no-install] [--strict] (unknown argument: $arg)" >&2; exit 2 ;;
  esac
done

is_root() { [ "$(id -u)" = 0 ]; }
have_faketime() { ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1; }
have_cgroup2() { [ -w /sys/fs/cgroup/cgroup.procs ] || [ -w /sys/fs/cgroup/unified/cgroup.procs ]; }
have_freezer_v1() { [ -f /sys/fs/cgroup/freezer/cgroup.procs ] && [ ! -f /sys/fs/cgroup/freezer/cgroup.controllers ]; }
have_blkio() { [ -d /sys/fs/cgroup/blkio ] || grep -qw io /sys/fs/cgroup/cgroup.controllers 2>/dev/null; }
# PostgreSQL's server binaries; as root the test runs them as user postgres (the package's).
have_postgres() { ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && { ! is_root || id postgres >/dev/null 2>&1; }; }

# Installs the Debian packages that the groups below need and this machine lacks, where it
# can; what it cannot install leaves those groups skipped, by name.
install_missing() {
  local missing=""
  command -v chromium >/dev/null || missing="$missing chromium"
  command -v ip >/dev/null || missing="$missing iproute2"
  command -v nft >/dev/null || missing="$missing nftables"
  have_faketime || missing="$missing libfaketime"
  have_postgres || missing="$missing postgresql"
  [ -n "$missing" ] || return 0
  local sudo=""
  if ! is_root; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
      sudo="sudo -n"
    else
      echo "note: not root and no passwordless sudo: not installing$missing"
      return 0
    fi
  fi
  if ! command -v apt-get >/dev/null; then
    echo "note: no apt-get here: not installing$missing"
    return 0
  fi
  echo "== installing$missing (Debian packages the tests need)"
  $sudo apt-get update -qq || echo "note: apt-get update failed"
  # shellcheck disable=SC2086 # one word per package
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing \
    || echo "note: installing$missing failed; the tests that need them are skipped below"
}

[ "$install" = 1 ] && install_missing

log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=0
skipped=()

# bounded SECONDS COMMAND...: COMMAND, killed with every test it started once it has run
# SECONDS. A test that hangs would otherwise hold the run until CI's own limit, which says
# nothing of which test it was; libtest has named it above ("running for over 60 seconds").
bounded() {
  local secs="$1"
  shift
  timeout --kill-after=30 "$secs" "$@"
  local rc=$?
  [ "$rc" = 124 ] || [ "$rc" = 137 ] || return "$rc"
  echo "== TIMED OUT after ${secs} s: $* (the test still running above hangs)"
  return "$rc"
}

echo "== cargo test --workspace"
bounded 2700 cargo test --workspace --no-fail-fast 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" = 0 ] || failed=1

# group NAME WHY CHECK -- CARGO_TEST_ARGS...: runs the ignored tests of one group where CHECK
# holds, and records them as skipped, with WHY, where it does not. Each group names its test
# target with `--workspace` (not `-p PACKAGE`): features are then unified as in the first
# pass, whose builds it reuses; with `-p`, cargo rebuilt dozens of crates for each group.
group() {
  local name="$1" why="$2" check="$3"
  shift 4
  if eval "$check"; then
    echo "== $name (cargo test $* -- --ignored)"
    bounded 1200 cargo test "$@" -- --ignored 2>&1 | tee -a "$log"
    [ "${PIPESTATUS[0]}" = 0 ] || failed=1
  else
    # Each test by name: listing builds the tests but runs none.
    local t
    while read -r t; do
      skipped+=("$t ($name): $why")
    done < <(cargo test -q "$@" -- --ignored --list --format terse 2>/dev/null | sed -n 's/: test$//p')
  fi
}

group "the dashboard in a browser (crates/cli/tests/dashboard.rs)" \
  "needs Debian's chromium" \
  'command -v chromium >/dev/null' -- --workspace --test dashboard
group "jobs run as their users (crates/agent/tests/run_as.rs)" \
  "needs root (it creates a Unix user)" \
  'is_root' -- --workspace --test run_as
group "replicas in cgroups (crates/agent/tests/cgroups.rs)" \
  "needs root and a writable cgroup v2 hierarchy" \
  'is_root && have_cgroup2' -- --workspace --test cgroups
group "an agent in a container's cgroup namespace (crates/cli/tests/init.rs)" \
  "needs root, a writable cgroup v2 hierarchy and unshare(1)" \
  'is_root && have_cgroup2 && command -v unshare >/dev/null' -- --workspace --test init
group "processes that survive SIGKILL (crates/agent/tests/unkillable.rs, crates/cli/tests/workload.rs)" \
  "needs root, a writable cgroup v2 hierarchy and the cgroup v1 freezer (a host with hybrid cgroups)" \
  'is_root && have_cgroup2 && have_freezer_v1' -- --workspace --test unkillable --test workload
group "an escaped process after its job's cancel (tests/e2e: a_job_that_escapes_with_setsid_leaves_nothing_after_its_cancel)" \
  "needs root and a writable cgroup v2 hierarchy" \
  'is_root && have_cgroup2' -- --workspace --test e2e a_job_that_escapes_with_setsid_leaves_nothing_after_its_cancel
group "the partition network (chaos/tests/net.rs)" \
  "needs root, ip (iproute2) and nft (nftables)" \
  'is_root && command -v ip >/dev/null && command -v nft >/dev/null' -- --workspace --test net
group "slow disks (chaos/tests/disk.rs)" \
  "needs root and a block IO cgroup controller" \
  'is_root && have_blkio' \
  -- --workspace --test disk
group "partitions under load (tests/e2e: thirty_seconds_of_partitions_break_no_promise)" \
  "needs root, ip, nft and libfaketime" \
  'is_root && command -v ip >/dev/null && command -v nft >/dev/null && have_faketime' \
  -- --workspace --test e2e thirty_seconds_of_partitions_break_no_promise
group "accounting into PostgreSQL (crates/server/tests/postgres.rs)" \
  "needs PostgreSQL's server binaries (Debian's postgresql)" \
  'have_postgres' -- --workspace --test postgres
group "a deposed leader's agents (tests/e2e/deposed.rs)" \
  "needs root, ip and nft" \
  'is_root && command -v ip >/dev/null && command -v nft >/dev/null' \
  -- --workspace --test e2e agents_stop_obeying_a_leader_cut_from_its_peers

for s in "${skipped[@]}"; do
  echo "SKIPPED $s"
done
# The totals of every libtest summary line above; a test ignored in the first pass and run in
# the second counts once, as run.
awk -v skipped="${#skipped[@]}" '/^test result:/ {
       for (i = 1; i < NF; i++) {
         if ($(i + 1) ~ /^passed/) p += $i
         if ($(i + 1) ~ /^failed/) f += $i
       }
     }
     END { printf "%d passed, %d failed, %d skipped\n", p, f, skipped }' "$log"
if [ "$strict" = 1 ] && [ "${#skipped[@]}" != 0 ]; then
  echo "== FAILED: --strict and ${#skipped[@]} tests were skipped"
  exit 1
fi
if [ "$failed" != 0 ]; then
  echo "== FAILED: see the failing tests above"
  exit 1
fi
echo "== every test that could run here passed (${#skipped[@]} skipped)"
