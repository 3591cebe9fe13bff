#!/usr/bin/env bash
# Check the matched kernels and the learner on a real CUDA GPU, in one go.
#
#   scripts/gpu_check.sh [OUT_DIR]     # from anywhere, on a machine with nvidia-smi
#
# Python: the project's .venv when it holds a CUDA build of torch; otherwise the machine's own
# python3 with torch and triton (GPU machines without internet, where `make install` cannot run),
# with the repository on PYTHONPATH. Nothing is installed. Runs the Triton properties (under the
# interpreter and compiled on the GPU) and the learner-on-CUDA tests, then the CUDA kernel bench,
# whose rows go to OUT_DIR/bench_kernels_cuda.json (default: docs/figures). Exit status: pytest's.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-docs/figures}

if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu_check: no nvidia-smi on this machine; run this on a CUDA GPU machine" >&2
    exit 2
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

has_cuda_torch() { "$1" -c "import torch, triton; assert torch.cuda.is_available()" 2>/dev/null; }
if [ -x .venv/bin/python ] && has_cuda_torch .venv/bin/python; then
    PY=.venv/bin/python
elif has_cuda_torch python3; then
    PY=python3
else
    echo "gpu_check: no Python here has torch with CUDA and triton; run 'make install' on a" \
         "machine with internet, or install torch and triton" >&2
    exit 2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# The CPU cases of these tests run on pure-torch kernels here: compiling the C++ ones would only
# cost time on a machine that is here for its GPU.
export AGENT_RL_KERNELS=${AGENT_RL_KERNELS:-torch}
$PY -c "import torch, triton, transformers; print('python', '$PY', 'torch', torch.__version__,
'triton', triton.__version__, 'transformers', transformers.__version__)"

$PY -m pytest -q -rs -p no:cacheprovider tests/test_kernels_triton.py tests/test_matched_cuda.py
STATUS=$?

echo "== bench: matched kernels vs stock on $(nvidia-smi --query-gpu=name --format=csv,noheader) =="
mkdir -p "$OUT_DIR"
$PY -m agent_rl.benchmarks.kernels_cuda_bench --out "$OUT_DIR/bench_kernels_cuda.json" \
    || echo "gpu_check: the bench failed" >&2

if [ "$STATUS" -eq 0 ]; then
    echo "gpu_check: OK (every CUDA property and learner test held)"
else
    echo "gpu_check: FAILED (pytest exit $STATUS); see the failures above" >&2
fi
exit "$STATUS"
