#!/usr/bin/env bash
# Builds the `baton` container image from a binary built on this machine, without pulling
# any base image: the image holds the binary, the shared libraries it links (read off
# `ldd`), and `/bin/sh` with the three programs the agent's wrapper around each job replica
# runs (`sleep`, `mv`, `cat`: the agent refuses to start without them).
#
#   deploy/image.sh [TAG]        (default tag: baton:latest)
#
# BATON_BIN=path/to/baton uses that binary instead of building target/release/baton.
set -euo pipefail
# A BATON_BIN relative to where the script was called from, before moving to the checkout.
[ -n "${BATON_BIN:-}" ] && BATON_BIN="$(realpath "$BATON_BIN")"
cd "$(dirname "$0")/.."

tag="${1:-baton:latest}"
bin="${BATON_BIN:-target/release/baton}"
if [ -z "${BATON_BIN:-}" ]; then
  cargo build --release --bin baton
fi
[ -x "$bin" ] || { echo "error: $bin is not an executable baton binary" >&2; exit 1; }
command -v docker >/dev/null || { echo "error: docker is not installed" >&2; exit 1; }

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
root="$ctx/rootfs"
mkdir -p "$root/usr/local/bin" "$root/bin" "$root/tmp" "$root/var/lib/baton" "$root/etc"
cp "$bin" "$root/usr/local/bin/baton"
cp "$(readlink -f /bin/sh)" "$root/bin/sh"
tools=()
for tool in sleep mv cat; do
  found="$(command -v "$tool")" || { echo "error: $tool is not installed here (coreutils)" >&2; exit 1; }
  cp "$(readlink -f "$found")" "$root/bin/$tool"
  tools+=("$found")
done

# Every shared library these programs load, at the path the loader looks for it.
for prog in "$bin" /bin/sh "${tools[@]}"; do
  ldd "$prog" | awk '/=> \// { print $3 } /^[[:space:]]*\/[^ ]+/ { print $1 }' | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
done
# Names for the users the processes run as: root (replicas and agents) and the two users
# deploy/compose.yaml's agents run jobs as (`--run-as-allow admin,alice`), so that no job
# runs as root there. A site gives the agents its own users instead.
cat > "$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
admin:x:1000:1000:baton admin:/tmp:/bin/sh
alice:x:1001:1001:alice:/tmp:/bin/sh
PASSWD
cat > "$root/etc/group" <<'GROUP'
root:x:0:
admin:x:1000:
alice:x:1001:
GROUP
chmod 1777 "$root/tmp"

cp deploy/Dockerfile "$ctx/Dockerfile"
docker build --quiet --tag "$tag" "$ctx" >/dev/null 2>"$ctx/build.log" || { cat "$ctx/build.log" >&2; exit 1; }
echo "built image $tag ($(docker image inspect "$tag" --format '{{.Size}}') bytes)"
