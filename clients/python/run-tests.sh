#!/usr/bin/env bash
# The Python client's tests: a virtual environment (python3 -m venv), the package installed
# into it with its test extras (which compiles proto/ with grpcio-tools), then pytest, whose
# tests start a real `baton dev` cluster from BATON_BIN (default: target/debug/baton, so run
# `cargo build --bin baton` first). Arguments go to pytest. Exits non-zero on any failure.
#
#   VENV    where the environment is made (default: clients/python/.venv)
#   PYTHON  the interpreter that makes it (default: python3)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${VENV:-$here/.venv}"

export BATON_BIN="${BATON_BIN:-$root/target/debug/baton}"
case "$BATON_BIN" in
  /*) ;;
  *) BATON_BIN="$root/$BATON_BIN" ;;
esac

if [ ! -x "$BATON_BIN" ]; then
  echo "error: no baton binary at $BATON_BIN: run cargo build --bin baton, or set BATON_BIN" >&2
  exit 1
fi

"${PYTHON:-python3}" -m venv "$venv"
py="$venv/bin/python"
# pip builds a local folder anew on every install: the package always has this checkout's
# proto/ compiled in, never a stale copy.
"$py" -m pip install --quiet --disable-pip-version-check "$here[test]"

cd "$here"
"$py" -m pytest -p no:cacheprovider "$@"
