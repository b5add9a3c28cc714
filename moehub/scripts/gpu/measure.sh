#!/usr/bin/env bash
# One device run: what CALIBRATION.md lists as missing and one GPU can measure (launch,
# CUDA-graph and sync latencies; the expert-GEMM sweep). Writes JSON files to $1 (default .).
set -uo pipefail
out=${1:-.}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit \
    --format=csv > "$out/nvidia_smi.csv" 2>&1
nvcc -O2 -arch=sm_90 "$here/launch_sync.cu" -o /tmp/launch_sync && /tmp/launch_sync > "$out/launch_sync.json"
cat "$out/launch_sync.json"
python3 "$here/gemm_sweep.py" "$out/gemm_sweep.json"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv >> "$out/nvidia_smi.csv" 2>&1
