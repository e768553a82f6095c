# Sourced by the checks for a GPU machine (gpu-inventory.sh, gpu-e2e.sh).
# gpu_check_setup DEFAULT_OUT: goes to the repository's root, makes $out ($OUT, else
# DEFAULT_OUT) and sets $bin to $BATON_BIN, else target/release/baton, else builds it.
gpu_check_setup() {
  cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
  out="${OUT:-$1}"
  mkdir -p "$out"
  bin="${BATON_BIN:-target/release/baton}"
  if [ ! -x "$bin" ]; then
    cargo build --release --bin baton || exit 1
    bin=target/release/baton
  fi
}
