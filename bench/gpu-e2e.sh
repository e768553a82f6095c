#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and its driver: `baton dev`, whose agents find the GPUs
# through NVML, runs a job on one whole GPU and one on half a GPU, and records what each job
# saw (CUDA_VISIBLE_DEVICES, nvidia-smi, and CUDA's own device count where PyTorch is there),
# the nodes as the cluster lists them, the agents' GPU metrics and their logs. For
# BENCHMARKS.md ("On a GPU machine"). Writes into $OUT (default ./gpu-e2e). Uses $BATON_BIN,
# else target/release/baton, else builds it. Exits non-zero when a job did not succeed.
set -uo pipefail
. "$(dirname "$0")/gpu-lib.sh"
gpu_check_setup gpu-e2e
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
work="$(mktemp -d /tmp/baton-gpu-e2e-XXXXXX)"
port="${BATON_E2E_PORT:-7370}"

"$bin" dev --dir "$work/data" --port "$port" --gpus 2 > "$out/dev.txt" 2>&1 &
dev=$!
stop_dev() {
  kill -INT "$dev" 2> /dev/null
  wait "$dev" 2> /dev/null
  tar -C "$work/data" -czf "$out/logs.tar.gz" logs 2> /dev/null
}
trap stop_dev EXIT

for _ in $(seq 1 240); do
  grep -q "Press Ctrl-C" "$out/dev.txt" && break
  kill -0 "$dev" 2> /dev/null || { echo "baton dev exited:"; cat "$out/dev.txt"; exit 1; }
  sleep 0.5
done
grep -q "Press Ctrl-C" "$out/dev.txt" || { echo "baton dev did not come up in 120 s"; exit 1; }
eval "$(grep '^  export ' "$out/dev.txt" | sed 's/#.*//')"
export BATON_SERVER BATON_TLS_DIR BATON_TOKEN_FILE

# What each job prints: what it was given and what the driver and CUDA let it see.
probe='echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES BATON_GPU_FRACTION=${BATON_GPU_FRACTION:-}"
nvidia-smi -L 2>&1
if command -v python3 > /dev/null; then
  python3 -c "import torch; print(\"cuda devices visible:\", torch.cuda.device_count(), [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])" 2>&1 | tail -1
fi'

{
  echo "== nodes"
  "$bin" nodes
  "$bin" queue create team-a --gpus 8
  "$bin" submit --name whole --queue team-a --gpus 1 -- sh -c "$probe"
  "$bin" submit --name half --queue team-a --gpus 0.5 -- sh -c "$probe"
} > "$out/cluster.txt" 2>&1

status=0
for job in whole half; do
  state=""
  for _ in $(seq 1 120); do
    state="$("$bin" describe "$job" 2>&1 | sed -n 's/^State: *//p' | head -1)"
    case "$state" in Succeeded* | Failed* | Cancelled* | Lost*) break ;; esac
    sleep 0.5
  done
  {
    echo "== $job: $state"
    "$bin" describe "$job" --events
    echo "== $job: logs"
    "$bin" logs "$job"
  } >> "$out/cluster.txt" 2>&1
  case "$state" in Succeeded*) ;; *) status=1 ;; esac
done

{
  echo "== nodes after"
  "$bin" nodes
  echo "== agents' GPU metrics"
  grep -o 'http://[^ ]*/metrics' "$out/dev.txt" | tail -2 | while read -r url; do
    echo "-- $url"
    curl -s "$url" | grep -i 'gpu' | grep -v '^#' | head -40
  done
} >> "$out/cluster.txt" 2>&1
cat "$out/cluster.txt"
echo "gpu-e2e: exit $status"
exit "$status"
