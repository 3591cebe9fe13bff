"""Property tests of the compiled CPU kernels (`kernels/csrc`): each output is invariant to batch
size, batch order and thread count bit for bit, a decode step equals teacher forcing bit for bit,
a paged cache gives the contiguous bits, and results stay close to float64 reference math.

What runs where: on the CPU, these tests check the compiled code itself, at the instruction-set
level this CPU dispatches to (`python -m kernels.isa` names it); `test_every_isa_level_gives_the
_same_bits` also builds each other level this CPU can run (AVX-512, AVX2, baseline x86-64) and
checks that all give the same bits, and skips, naming the missing flags, a level this CPU lacks.
No result may depend on the CPU model: the kernels use only lane-wise IEEE adds, multiplies and
explicit fused multiply-adds in a fixed order. These kernels never run under Triton or on a GPU.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from kernel_cases import decode_differs_from_teacher_forcing, paged_cache, qkv, rows_invariant

from kernels import cpp_ops, cpu_ops, isa, ops, reference

DTYPES = [torch.float32, torch.bfloat16]
BATCH_SIZES = [1, 2, 3, 5, 8, 15, 16, 17, 31, 33, 63, 64, 65, 100, 129, 200]


@pytest.fixture(scope="module", autouse=True)
def compiled() -> None:
    """Builds the extension once (cached on disk); skips, saying why, where it cannot be built."""
    if not cpp_ops.available():
        pytest.skip(f"compiled matched kernels unavailable: {cpp_ops.unavailable_reason()}")


def _with_threads(threads: int, fn):
    before = torch.get_num_threads()
    torch._C.set_num_threads(threads)  # vLLM replaces torch.set_num_threads in-process
    try:
        return fn()
    finally:
        torch._C.set_num_threads(before)


def test_cpu_tensors_dispatch_to_the_compiled_backend() -> None:
    assert ops.backend(torch.zeros(1)) is cpp_ops


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("k", "n"), [(128, 256), (100, 67), (576, 192)])
def test_compiled_linear_rows_are_batch_invariant(dtype: torch.dtype, k: int, n: int) -> None:
    torch.manual_seed(0)
    weight = torch.randn(n, k).to(dtype)
    rows = torch.randn(200, k).to(dtype)
    assert rows_invariant(lambda x: cpp_ops.linear(x, weight), rows, BATCH_SIZES) == []


def test_compiled_linear_repacks_a_weight_changed_in_place() -> None:
    """The packed weight is kept per weight version, so an optimizer step or a weight load that
    writes in place is seen by the next call."""
    torch.manual_seed(5)
    weight = torch.nn.Parameter(torch.randn(70, 48))
    x = torch.randn(9, 48)
    before = cpp_ops.linear(x, weight)
    with torch.no_grad():
        weight.mul_(2)
    assert torch.equal(cpp_ops.linear(x, weight), 2 * before)  # exact: scaled by a power of 2
    assert torch.equal(cpp_ops.linear(x, weight), cpp_ops.linear(x, weight.detach().clone()))
    weight.data.mul_(2)  # as vLLM's loaders write: the version counter does not move
    ops.forget_packed_weights()
    assert torch.equal(cpp_ops.linear(x, weight), 4 * before)


@pytest.mark.parametrize("dtype", DTYPES)
def test_compiled_norm_and_activation_are_batch_invariant(dtype: torch.dtype) -> None:
    torch.manual_seed(1)
    weight = torch.randn(100).to(dtype)
    rows = (torch.randn(200, 100) * 4).to(dtype)
    up = torch.randn(200, 100).to(dtype)
    assert rows_invariant(lambda x: cpp_ops.rms_norm(x, weight, 1e-5), rows, BATCH_SIZES) == []
    combined = torch.stack((rows, up), dim=1)
    assert rows_invariant(lambda x: cpp_ops.silu_and_mul(x[:, 0], x[:, 1]), combined, BATCH_SIZES) == []


def test_compiled_ops_are_invariant_across_thread_counts() -> None:
    torch.manual_seed(2)
    weight, rows, norm = torch.randn(200, 96), torch.randn(150, 96), torch.randn(96)
    q, k, v = qkv(300, heads=6)

    def run() -> list[torch.Tensor]:
        return [cpp_ops.linear(rows, weight), cpp_ops.linear(rows[9:10], weight),
                cpp_ops.rms_norm(rows, norm, 1e-5), cpp_ops.silu_and_mul(rows, rows.flip(0)),
                cpp_ops.attention(q, k, v, 0.2)]

    one, two = _with_threads(1, run), _with_threads(2, run)
    assert all(torch.equal(a, b) for a, b in zip(one, two, strict=True))
    assert torch.equal(one[1][0], one[0][9])


def test_compiled_exp_equals_the_torch_backend_bitwise() -> None:
    x = torch.cat((torch.linspace(-100.0, 100.0, 200_001), torch.tensor([0.0, -0.0, 1e-30])))
    assert torch.equal(torch.ops.agent_rl_matched.exp(x), cpu_ops.exp(x))


def test_compiled_lm_head_widens_a_bf16_weight_exactly() -> None:
    torch.manual_seed(3)
    weight = torch.randn(1000, 64).to(torch.bfloat16)
    hidden = torch.randn(20, 64).to(torch.bfloat16)
    assert torch.equal(cpp_ops.lm_head_logits(hidden, weight),
                       cpp_ops.lm_head_logits(hidden, weight.float()))
    assert rows_invariant(lambda x: ops.lm_head_logprobs(x, weight),
                          torch.randn(200, 64).to(torch.bfloat16), BATCH_SIZES) == []


@pytest.mark.parametrize("dtype", DTYPES)
def test_compiled_ops_match_float64_reference(dtype: torch.dtype) -> None:
    torch.manual_seed(4)
    tol = 2e-5 if dtype == torch.float32 else 2e-2
    x, w = torch.randn(37, 100), torch.randn(80, 100)
    gate, up, norm_w = torch.randn(37, 80), torch.randn(37, 80), torch.randn(100)

    def check(fast, ref, *args) -> None:
        got = fast(*(a.to(dtype) for a in args)).double()
        want = ref(*(a.to(dtype).double() for a in args))
        assert ((got - want).abs() / (want.abs() + 1)).max().item() < tol

    check(cpp_ops.linear, reference.linear, x, w)
    check(lambda a, b: cpp_ops.rms_norm(a, b, 1e-5),
          lambda a, b: reference.rms_norm(a, b, 1e-5), x, norm_w)
    check(cpp_ops.silu_and_mul, reference.silu_and_mul, gate, up)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [32, 40, 64, 80])
def test_compiled_attention_matches_float64_reference(dtype: torch.dtype, dim: int) -> None:
    q, k, v = qkv(300, heads=6, dim=dim)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    got = cpp_ops.attention(q, k, v, dim ** -0.5).double()
    want = reference.attention(q.double(), k.double(), v.double(), dim ** -0.5)
    assert (got - want).abs().max().item() < (2e-6 if dtype == torch.float32 else 3e-2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [32, 40, 64, 80])
def test_compiled_decode_matches_teacher_forcing_bitwise(dtype: torch.dtype, dim: int) -> None:
    q, k, v = (t.to(dtype) for t in qkv(200, heads=6, dim=dim))
    positions = [0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 150, 199]
    assert decode_differs_from_teacher_forcing(cpp_ops.attention, q, k, v, positions) == []


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size", [16, 32, 128])
def test_compiled_paged_attention_matches_contiguous_bitwise(dtype: torch.dtype,
                                                             block_size: int) -> None:
    """Prefill chunks and decode tokens of several sequences in one step, over a paged cache
    whose unused slots and table entries are garbage (NaN, out-of-range block ids)."""
    lengths, new_tokens = [5, 130, 64, 33, 1, 90], [5, 1, 20, 1, 1, 37]
    seqs = [tuple(t.to(dtype) for t in qkv(n, heads=6, seed=n)) for n in lengths]
    cache, table = paged_cache([s[1] for s in seqs], [s[2] for s in seqs], block_size,
                               fill=math.nan, spare_columns=2,
                               write=cpp_ops.write_paged_kv)
    q = torch.cat([s[0][-n:] for s, n in zip(seqs, new_tokens, strict=True)])
    positions = torch.cat([torch.arange(length - n, length)
                           for length, n in zip(lengths, new_tokens, strict=True)])
    starts = torch.tensor([0, *torch.tensor(new_tokens).cumsum(0).tolist()], dtype=torch.int32)
    plan = ops.plan_paged(starts, torch.tensor(lengths, dtype=torch.int32), positions, table,
                          block_size)
    got = cpp_ops.paged_attention(q, cache, plan, 0.2)
    want = torch.cat([cpp_ops.attention(*s, 0.2)[-n:]
                      for s, n in zip(seqs, new_tokens, strict=True)])
    assert torch.equal(got, want)
    reordered = [2, 0, 5, 1, 4, 3]
    q_re = torch.cat([seqs[i][0][-new_tokens[i]:] for i in reordered])
    pos_re = torch.cat([torch.arange(lengths[i] - new_tokens[i], lengths[i]) for i in reordered])
    starts_re = torch.tensor([0, *torch.tensor([new_tokens[i] for i in reordered]).cumsum(0)])
    plan_re = ops.plan_paged(starts_re, torch.tensor([lengths[i] for i in reordered]), pos_re,
                             table[reordered], block_size)
    got_re = cpp_ops.paged_attention(q_re, cache, plan_re, 0.2)
    want_re = torch.cat([want[starts[i]:starts[i + 1]] for i in reordered])
    assert torch.equal(got_re, want_re)


def _fixed_outputs() -> dict[str, torch.Tensor]:
    """Every compiled op on fixed inputs of both dtypes: what each ISA level must reproduce."""
    torch.manual_seed(7)
    out = {}
    for dtype in DTYPES:
        name = str(dtype).removeprefix("torch.")
        x, weight = torch.randn(37, 576).to(dtype), torch.randn(200, 576).to(dtype)
        gate, up, norm = torch.randn(37, 200), torch.randn(37, 200), torch.randn(576)
        out[f"linear/{name}"] = cpp_ops.linear(x, weight)
        out[f"lm_head/{name}"] = cpp_ops.lm_head_logits(x, weight)
        out[f"rms_norm/{name}"] = cpp_ops.rms_norm(x, norm.to(dtype), 1e-5)
        out[f"silu_and_mul/{name}"] = cpp_ops.silu_and_mul(gate.to(dtype), up.to(dtype))
        for dim in (32, 64):
            q, k, v = (t.to(dtype) for t in qkv(150, heads=6, dim=dim))
            out[f"attention/{name}/d{dim}"] = cpp_ops.attention(q, k, v, dim ** -0.5)
        lengths, new_tokens = [5, 130, 70], [5, 1, 20]
        seqs = [tuple(t.to(dtype) for t in qkv(n, heads=6, seed=n)) for n in lengths]
        cache, table = paged_cache([s[1] for s in seqs], [s[2] for s in seqs], 32,
                                   write=cpp_ops.write_paged_kv)
        q = torch.cat([s[0][-n:] for s, n in zip(seqs, new_tokens, strict=True)])
        positions = torch.cat([torch.arange(length - n, length)
                               for length, n in zip(lengths, new_tokens, strict=True)])
        starts = torch.tensor([0, *torch.tensor(new_tokens).cumsum(0).tolist()])
        plan = ops.plan_paged(starts, torch.tensor(lengths), positions, table, 32)
        out[f"paged_attention/{name}"] = cpp_ops.paged_attention(q, cache, plan, 0.2)
    out["exp"] = torch.ops.agent_rl_matched.exp(torch.linspace(-100.0, 100.0, 20_001))
    return out


@pytest.mark.slow  # compiles the op library once per ISA level: minutes, not for make test-fast
@pytest.mark.parametrize("level", isa.LEVELS)
def test_every_isa_level_gives_the_same_bits(level: str, tmp_path: Path) -> None:
    """The kernels built for one level alone (in a subprocess: a build is a process-wide torch
    library) give the bits of the dispatched build, op by op."""
    if level not in isa.supported_levels():
        pytest.skip(f"this CPU ({isa.cpu_model()}) cannot run {level}; the levels it runs are "
                    f"{isa.supported_levels()}; {level} is checked on a CPU that has it")
    saved = tmp_path / "outputs.pt"
    env = {**os.environ, isa.FORCE_VARIABLE: level,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[2]),
                                                       os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, __file__, str(saved)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    forced, dispatched = torch.load(saved), _fixed_outputs()
    differ = [name for name in dispatched if not torch.equal(forced[name], dispatched[name])]
    assert differ == [], f"{level} differs from the dispatched level {isa.dispatched_level()}"


if __name__ == "__main__":
    if not cpp_ops.available():
        sys.exit(f"compiled kernels unavailable: {cpp_ops.unavailable_reason()}")
    torch.save(_fixed_outputs(), sys.argv[1])
