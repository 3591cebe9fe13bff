"""Properties of the Triton backend (`kernels.triton_ops`): agreement with float64 reference math,
batch invariance bit for bit, and decode equal to teacher forcing bit for bit.

Each property is a plain function of a device. They run twice:
- Under Triton's interpreter on CPU tensors, in one subprocess (TRITON_INTERPRET must be set
  before triton is imported, so not in this process). This checks the kernels' logic: tiling,
  masks, addressing, the walk over key blocks and the online softmax. The interpreter would run
  `tl.dot` through numpy's BLAS, whose bits depend on the CPU model and on a row's place in the
  tile, so there tile products are an explicit multiply and sum (`triton_ops._dot`): the bitwise
  properties then hold on every CPU and say nothing of the GPU's reduction order.
- On a CUDA GPU in this process, when one is present (else skipped, saying so): the compiled
  code, tensor-core products included, held to the same properties bit for bit.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
import torch
from kernel_cases import decode_differs_from_teacher_forcing, paged_cache, qkv, rows_invariant

from kernels import cpu_ops, reference

ROOT = Path(__file__).resolve().parents[2]
DTYPES = [torch.float32, torch.bfloat16]
# Around the 64-row GEMM tile; one-program-per-row kernels need fewer (the interpreter is slow).
BATCH_SIZES = [1, 5, 17, 63, 64, 65, 130]
ROW_KERNEL_BATCH_SIZES = [1, 5, 17, 40]
# Relative error bound (|got - want| / (|want| + 1)) against float64 math.
TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 2e-1}
ATTENTION_TOLERANCE = {torch.float32: 2e-6, torch.bfloat16: 3e-2}

INTERPRETER_BROKEN = "the interpreter itself"
# name[dtype] -> check(device); a check raises AssertionError when its property fails.
PROPERTIES: dict[str, Callable[[str], None]] = {}


def _property(fn: Callable[..., None]) -> Callable[..., None]:
    """Register fn(device, dtype) once per dtype, or fn(device) once if it takes no dtype."""
    if "dtype" in fn.__code__.co_varnames[:fn.__code__.co_argcount]:
        for dtype in DTYPES:
            PROPERTIES[f"{fn.__name__}[{str(dtype).removeprefix('torch.')}]"] = partial(
                fn, dtype=dtype)
    else:
        PROPERTIES[fn.__name__] = fn
    return fn


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double().cpu(), want.double().cpu()
    return ((got - want).abs() / (want.abs() + 1)).max().item()


@_property
def linear_matches_float64_reference(device: str, dtype: torch.dtype) -> None:
    from kernels import triton_ops

    torch.manual_seed(4)
    x, weight = torch.randn(37, 96).to(dtype), torch.randn(80, 96).to(dtype)
    got = triton_ops.linear(x.to(device), weight.to(device))
    assert got.dtype == dtype
    error = _relative_error(got, reference.linear(x.double(), weight.double()))
    assert error < TOLERANCE[dtype], error
    logits = triton_ops.lm_head_logits(x.to(device), weight.to(device))
    assert logits.dtype == torch.float32
    want = reference.lm_head_logits(x.double(), weight.double())
    assert _relative_error(logits, want) < TOLERANCE[torch.float32]


@_property
def linear_rows_are_batch_invariant(device: str, dtype: torch.dtype) -> None:
    from kernels import triton_ops

    torch.manual_seed(0)
    weight = torch.randn(80, 96).to(device, dtype)
    rows = torch.randn(130, 96).to(device, dtype)
    assert rows_invariant(lambda x: triton_ops.linear(x, weight), rows, BATCH_SIZES) == []
    head = torch.randn(300, 96).to(device, dtype)
    assert rows_invariant(lambda x: triton_ops.lm_head_logits(x, head), rows, BATCH_SIZES) == []


@_property
def elementwise_ops_match_float64_reference(device: str, dtype: torch.dtype) -> None:
    from kernels import triton_ops

    torch.manual_seed(4)
    x, norm_weight = torch.randn(37, 96), torch.randn(96)
    gate, up = torch.randn(37, 80), torch.randn(37, 80)
    cos, sin = cpu_ops.rotary_tables(32, 64, 10000.0)
    heads = torch.randn(37, 3, 32)

    def check(fast: Callable, ref: Callable, *args: torch.Tensor) -> None:
        args = tuple(a.to(dtype) for a in args)
        got = fast(*(a.to(device) for a in args))
        error = _relative_error(got, ref(*(a.double() for a in args)))
        assert error < TOLERANCE[dtype], (fast, error)

    check(lambda a, w: triton_ops.rms_norm(a, w, 1e-5),
          lambda a, w: reference.rms_norm(a, w, 1e-5), x, norm_weight)
    check(triton_ops.silu_and_mul, reference.silu_and_mul, gate, up)
    check(lambda a: triton_ops.rotary(a, cos[:37].to(device), sin[:37].to(device)),
          lambda a: reference.rotary(a, cos[:37].double(), sin[:37].double()), heads)


@_property
def elementwise_ops_are_batch_invariant(device: str, dtype: torch.dtype) -> None:
    from kernels import triton_ops

    torch.manual_seed(2)
    cos, sin = (t.to(device) for t in cpu_ops.rotary_tables(32, 512, 10000.0))
    positions = torch.randint(0, 512, (40,)).to(device)
    weight = torch.randn(192).to(device, dtype)
    rows = (torch.randn(40, 192) * 4).to(device, dtype)
    up = torch.randn(40, 192).to(device, dtype)
    sizes = ROW_KERNEL_BATCH_SIZES
    assert rows_invariant(lambda x: triton_ops.rms_norm(x, weight, 1e-5), rows, sizes) == []
    combined = torch.stack((rows, up), dim=1)
    assert rows_invariant(lambda x: triton_ops.silu_and_mul(x[:, 0], x[:, 1]), combined,
                           sizes) == []
    packed = torch.cat((rows.float(), positions[:, None].float()), dim=1)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        pos = x[:, -1].long()
        return triton_ops.rotary(x[:, :-1].reshape(-1, 6, 32).to(dtype), cos[pos], sin[pos])

    assert rows_invariant(rotate, packed, sizes) == []


@_property
def log_softmax_matches_reference_and_is_batch_invariant(device: str) -> None:
    from kernels import triton_ops

    torch.manual_seed(3)
    logits = torch.randn(40, 2100) * 6  # three 1024-wide chunks, the last one partial
    logits[0, :100] = -math.inf  # a masked vocabulary slice (top-k) must stay finite elsewhere
    got = triton_ops.log_softmax(logits.to(device))
    want = logits.double().log_softmax(dim=-1)
    assert torch.equal(got[0, :100].cpu(), want[0, :100].float())
    assert (got[:, 100:].double().cpu() - want[:, 100:]).abs().max().item() < 1e-5
    assert rows_invariant(triton_ops.log_softmax, logits.to(device),
                           ROW_KERNEL_BATCH_SIZES) == []


@_property
def attention_matches_float64_reference(device: str, dtype: torch.dtype) -> None:
    from kernels import triton_ops

    for heads, kv_heads in [(4, 2), (6, 2)]:  # head groups of 2 and of 3 (rows padded to 64)
        q, k, v = (t.to(dtype) for t in qkv(150, heads, kv_heads))
        scale = 32 ** -0.5
        want = reference.attention(q.double(), k.double(), v.double(), scale)
        got = triton_ops.attention(q.to(device), k.to(device), v.to(device), scale)
        error = (got.double().cpu() - want).abs().max().item()
        assert error < ATTENTION_TOLERANCE[dtype], (heads, kv_heads, error)


@_property
def decode_matches_teacher_forcing_bitwise(device: str, dtype: torch.dtype) -> None:
    from kernels import triton_ops

    q, k, v = (t.to(device, dtype) for t in qkv(150))
    assert decode_differs_from_teacher_forcing(triton_ops.attention, q, k, v) == []


@_property
def paged_attention_mixed_batch_matches_contiguous_bitwise(device: str,
                                                            dtype: torch.dtype) -> None:
    """A step mixing prefill chunks and decode tokens of other sequences, over a paged cache.

    The 20-token chunk at positions 50..69 puts queries 50..63 in a tile that also walks key
    block 64..127, which is fully masked for them.
    """
    from kernels import triton_ops

    lengths, new_tokens = [5, 130, 70, 33, 1], [5, 1, 20, 1, 1]
    seqs = [tuple(t.to(dtype) for t in qkv(n, seed=n)) for n in lengths]
    cache, table = paged_cache([s[1] for s in seqs], [s[2] for s in seqs], block_size=32,
                                 write=cpu_ops.write_paged_kv)
    q = torch.cat([s[0][-n:] for s, n in zip(seqs, new_tokens, strict=True)])
    positions = torch.cat([torch.arange(length - n, length)
                           for length, n in zip(lengths, new_tokens, strict=True)])
    starts = torch.tensor([0, *torch.tensor(new_tokens).cumsum(0).tolist()])
    plan = cpu_ops.plan_paged(starts, torch.tensor(lengths), positions, table, block_size=32)
    got = triton_ops.paged_attention(q.to(device), cache.to(device), plan, 0.2)
    want = torch.cat([triton_ops.attention(*(t.to(device) for t in s), 0.2)[-n:]
                      for s, n in zip(seqs, new_tokens, strict=True)])
    assert torch.equal(got, want)


def _interpreter_canary() -> None:
    """A loop over a scalar argument, as every kernel has: some triton/numpy pairs cannot
    interpret it at all (triton 3.6 with numpy 2.5: 'only 0-dimensional arrays can be
    converted to Python scalars'), which says nothing about our kernels."""
    import triton
    import triton.language as tl

    @triton.jit
    def count(out_ptr, n, STEP: tl.constexpr):
        total = 0
        for _ in range(0, n, STEP):
            total += 1
        tl.store(out_ptr, total)

    out = torch.zeros(1, dtype=torch.int32)
    count[(1,)](out, 10, STEP=4)
    assert out.item() == 3, out


def _run_all(device: str) -> dict[str, str]:
    """Every property on one device: 'ok' or the failure's traceback."""
    if device == "cpu":
        try:
            _interpreter_canary()
        except Exception:
            return {INTERPRETER_BROKEN: traceback.format_exc()}
    results = {}
    for name, check in PROPERTIES.items():
        try:
            check(device)
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc()
    return results


@pytest.fixture(scope="module")
def interpreter_results() -> dict[str, str]:
    """Run every property once under TRITON_INTERPRET=1 in a fresh interpreter."""
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, __file__], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    if done.returncode != 0:
        pytest.fail(f"the interpreter run exited with {done.returncode}:\n{done.stderr[-4000:]}")
    results = json.loads(done.stdout.strip().splitlines()[-1])
    if INTERPRETER_BROKEN in results:
        import numpy
        import triton

        last_line = results[INTERPRETER_BROKEN].strip().splitlines()[-1]
        pytest.skip(f"Triton {triton.__version__}'s interpreter cannot run a plain kernel with "
                    f"numpy {numpy.__version__} ({last_line}); the project's own install pins a "
                    "pair that works, and the CUDA run checks the compiled kernels")
    return results


@pytest.mark.parametrize("name", list(PROPERTIES))
def test_property_holds_under_triton_interpreter(name: str,
                                                 interpreter_results: dict[str, str]) -> None:
    assert interpreter_results[name] == "ok", interpreter_results[name]


needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="no CUDA GPU here: the compiled Triton kernels are checked only on a GPU "
           "(scripts/gpu_check.sh); the interpreter tests above cover their logic")


@needs_cuda
@pytest.mark.parametrize("name", list(PROPERTIES))
def test_property_holds_on_cuda(name: str) -> None:
    PROPERTIES[name]("cuda")


@needs_cuda
def test_ops_run_cuda_tensors_on_triton_kernels() -> None:
    from kernels import ops, triton_ops

    x = torch.randn(3, 64, device="cuda")
    assert ops.backend(x) is triton_ops
    weight = torch.randn(32, 64, device="cuda")
    assert torch.equal(ops.linear(x, weight), triton_ops.linear(x, weight))
    assert torch.equal(ops.linear(x[1:2], weight)[0], ops.linear(x, weight)[1])


if __name__ == "__main__":
    print(json.dumps(_run_all("cuda" if torch.cuda.is_available() and
                              os.environ.get("TRITON_INTERPRET") != "1" else "cpu")))
