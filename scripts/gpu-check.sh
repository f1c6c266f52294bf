#!/usr/bin/env bash
# The full measurement on a CUDA machine, in under 8 minutes: device probes, decode and prefill
# against the planner, the Triton paged-decode kernel against the oracle and against SDPA, and the
# distributed all-reduce / KV-transfer check on the GPUs present. Writes JSON and text to $1.
#
#   bash scripts/gpu-check.sh [out-dir]
set -euo pipefail
OUT=${1:-gpu-check}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device')"
python -c "import kvplan" 2>/dev/null || python -m pip install -q -e ".[measure]"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,power.limit --format=csv \
  | tee "$OUT/nvidia-smi.csv" || true

echo "== measure (full sweep, bf16)"
timeout 300 python -m kvplan measure --device cuda --json "$OUT/measure.json" \
  --save-profile "$OUT/profile.yaml" | tee "$OUT/measure.txt"

echo "== Triton paged decode against the oracle"
timeout 120 python -m pytest -q tests/test_kernels.py -k "triton or oracle" | tee "$OUT/kernels.txt"

echo "== paged decode benchmark (Triton vs SDPA vs copy)"
timeout 60 python scripts/bench_paged_decode.py --device cuda --dtype bf16 \
  --json "$OUT/paged_decode.json" | tee "$OUT/paged_decode.txt"

GPUS=$(python -c "import torch; print(torch.cuda.device_count())")
if [ "$GPUS" -ge 2 ]; then
  echo "== distributed: NCCL all-reduce and KV transfer across $GPUS GPUs"
  timeout 120 python -m kvplan measure --distributed --nproc "$GPUS" --device cuda \
    --json "$OUT/distributed.json" | tee "$OUT/distributed.txt"
fi
echo "results in $OUT/"
