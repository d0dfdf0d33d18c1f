#!/usr/bin/env bash
# The GPU check (benchmarks/gpu_check.py holds the checks; every one asserts numbers; any failure exits 1).
#
#   bash benchmarks/gpu_check.sh [--model DIR] [--layers 8 --hidden 768 --vocab 8192] [--batch 8 --seq 1024]
#
# Tier A: a bare GPU image with torch and the project's wheels, no network, no .venv: tirl runs from src/ on
#   PYTHONPATH. Six memory options x 3 update steps on a `tirl model init` Qwen2 (~58M parameters), a two-step
#   `tirl train` on CUDA, `--nproc 2` with one GPU visible refused at once.
# Tier B: vLLM installed (make install-vllm; PYTHON=.venv-vllm/bin/python): log-prob parity engine vs trainer,
#   a sync read back from the engine and compared with the trained weights, a LoRA sync, a two-step
#   `tirl train --generator vllm`.
#
# Environment: PYTHON (default python3: the image's own), DEVICE (cuda; DEVICE=cpu dry-runs Tier A on a CPU),
# TIERS (AB; a tier asked for that cannot run - no GPU, no vLLM - is a failure, not a skip).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
exec "$PYTHON" benchmarks/gpu_check.py --device "${DEVICE:-cuda}" --tiers "${TIERS:-AB}" "$@"
