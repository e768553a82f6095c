#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and its driver: what baton's agent finds through NVML (the
# GPUs, their MIG mode and slices, the NVLink fabric's cluster and clique ids), beside what
# nvidia-smi says, for BENCHMARKS.md ("On a GPU machine"). Writes into $OUT (default
# ./gpu-inventory). Uses $BATON_BIN, else target/release/baton, else builds it.
set -euo pipefail
. "$(dirname "$0")/gpu-lib.sh"
gpu_check_setup gpu-inventory
{ uname -a; date -u +%FT%TZ; } > "$out/machine.txt"
nvidia-smi -L > "$out/nvidia-smi-L.txt" 2>&1 || echo "nvidia-smi -L failed" >> "$out/nvidia-smi-L.txt"
nvidia-smi -q > "$out/nvidia-smi-q.txt" 2>&1 || echo "nvidia-smi -q failed" >> "$out/nvidia-smi-q.txt"
status=0
"$bin" agent --inventory-only > "$out/inventory.json" 2> "$out/inventory.stderr" || status=$?
echo "baton agent --inventory-only exited $status" >> "$out/machine.txt"
cat "$out/inventory.json" "$out/inventory.stderr"
exit "$status"
