#!/usr/bin/env bash
# Check the Triton backend of the matched kernels on a real CUDA GPU, in one go.
#
#   scripts/gpu_check.sh            # from the repository root, on a machine with nvidia-smi
#
# `make install` builds .venv with the CUDA extras (vllm, triton); nothing else is installed.
# Then it runs tests/test_kernels_triton.py (the interpreter tests and the same properties on
# CUDA), times the matched GEMM and attention against torch's, and prints a summary. Exit status:
# pytest's, so a failing property fails the script.
set -uo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu_check: no nvidia-smi on this machine; run this on a CUDA GPU machine" >&2
    exit 2
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

make install || { echo "gpu_check: make install failed" >&2; exit 2; }
PY=.venv/bin/python
$PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__,
'cuda available:', torch.cuda.is_available())"

LOG=$(mktemp)
$PY -m pytest -q -rs -p no:cacheprovider tests/test_kernels_triton.py 2>&1 | tee "$LOG"
STATUS=${PIPESTATUS[0]}

echo "== timing (ms per call, median of 20; matched Triton vs torch) =="
$PY - <<'PYEOF'
import torch
import triton.testing

from kernels import triton_ops

torch.manual_seed(0)
dev = "cuda"
w = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
for m in (1, 64, 512, 4096):
    x = torch.randn(m, 4096, device=dev, dtype=torch.bfloat16)
    ours = triton.testing.do_bench(lambda: triton_ops.linear(x, w), rep=50)
    base = triton.testing.do_bench(lambda: x @ w.T, rep=50)
    print(f"linear bf16 M={m:5d} K=N=4096   triton {ours:8.3f}  torch {base:8.3f}")
head = torch.randn(49152, 576, device=dev)
hidden = torch.randn(256, 576, device=dev)
ours = triton.testing.do_bench(lambda: triton_ops.lm_head_logits(hidden, head), rep=50)
base = triton.testing.do_bench(lambda: hidden @ head.T, rep=50)
print(f"lm_head fp32 256 x 576 -> 49152  triton {ours:8.3f}  torch {base:8.3f}"
      f" (torch TF32 {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'})")
for length in (512, 4096):
    q = torch.randn(length, 32, 128, device=dev, dtype=torch.bfloat16)
    k = torch.randn(length, 8, 128, device=dev, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    ours = triton.testing.do_bench(lambda: triton_ops.attention(q, k, v, 128 ** -0.5), rep=50)
    qt, kt, vt = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
    base = triton.testing.do_bench(lambda: torch.nn.functional.scaled_dot_product_attention(
        qt, kt, vt, is_causal=True, enable_gqa=True), rep=50)
    print(f"attention bf16 T={length:5d} 32/8 heads D=128  triton {ours:8.3f}"
          f"  torch sdpa {base:8.3f}")
PYEOF

echo "== summary =="
tail -n 1 "$LOG"
if [ "$STATUS" -eq 0 ]; then
    GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
    echo "gpu_check: OK (every Triton property held on $GPU)"
else
    echo "gpu_check: FAILED (pytest exit $STATUS); see the failures above" >&2
fi
rm -f "$LOG"
exit "$STATUS"
