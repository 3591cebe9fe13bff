"""Property tests of the pure-torch CPU ops (`kernels.cpu_ops`, the fallback where the compiled
kernels cannot be built): batch invariance bit for bit, decode equals teacher forcing bit for
bit, and agreement with float64 reference math.

What runs where: on the CPU only. These ops lean on torch's GEMM over fixed 16-row tiles, so
their bits may differ from one CPU model to another, but each property compares a result with
another computed on the same machine, never with stored bits. Triton and GPU: see
`test_kernels_triton.py`; the compiled kernels: `test_kernels_cpp.py`.
"""

from __future__ import annotations

import pytest
import torch
from kernel_cases import decode_differs_from_teacher_forcing, paged_cache, qkv, rows_invariant

from kernels import cpu_ops, ops, reference

DTYPES = [torch.float32, torch.bfloat16]
BATCH_SIZES = [*range(1, 34), 47, 64, 100, 128, 255, 300]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("k", "n"), [(128, 256), (576, 192)])
def test_linear_rows_are_batch_invariant(dtype: torch.dtype, k: int, n: int) -> None:
    torch.manual_seed(0)
    weight = torch.randn(n, k).to(dtype)
    rows = torch.randn(300, k).to(dtype)
    assert rows_invariant(lambda x: ops.linear(x, weight), rows, BATCH_SIZES) == []


def test_linear_is_invariant_across_thread_counts() -> None:
    torch.manual_seed(1)
    weight, rows = torch.randn(384, 256), torch.randn(100, 256)
    before = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            torch._C.set_num_threads(threads)  # vLLM replaces torch.set_num_threads in-process
            results.append(ops.linear(rows, weight))
            results.append(ops.linear(rows[7:8], weight))
    finally:
        torch._C.set_num_threads(before)
    assert torch.equal(results[0], results[2])
    assert torch.equal(results[1], results[3]) and torch.equal(results[1][0], results[0][7])


@pytest.mark.parametrize("dtype", DTYPES)
def test_elementwise_ops_are_batch_invariant(dtype: torch.dtype) -> None:
    torch.manual_seed(2)
    weight = torch.randn(192).to(dtype)
    rows = (torch.randn(300, 192) * 4).to(dtype)
    up = torch.randn(300, 192).to(dtype)
    cos, sin = cpu_ops.rotary_tables(32, 4096, 10000.0)
    positions = torch.randint(0, 4096, (300,))
    assert rows_invariant(lambda x: ops.rms_norm(x, weight, 1e-5), rows, BATCH_SIZES) == []
    combined = torch.stack((rows, up), dim=1)
    assert rows_invariant(lambda x: ops.silu_and_mul(x[:, 0], x[:, 1]), combined, BATCH_SIZES) == []
    heads = rows.view(300, 6, 32)
    packed = torch.cat((heads.flatten(1).float(), positions[:, None].float()), dim=1)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        pos = x[:, -1].long()
        return ops.rotary(x[:, :-1].view(-1, 6, 32).to(dtype), cos[pos], sin[pos])

    assert rows_invariant(rotate, packed, BATCH_SIZES) == []


def test_lm_head_logprobs_are_batch_invariant() -> None:
    torch.manual_seed(3)
    weight = torch.randn(4096, 64).to(torch.bfloat16)
    rows = torch.randn(300, 64).to(torch.bfloat16)
    assert rows_invariant(lambda x: ops.lm_head_logprobs(x, weight), rows, BATCH_SIZES) == []


def test_exp_matches_float64_within_fp32_rounding() -> None:
    x = torch.linspace(-87.0, 88.0, 100_001)
    rel = (cpu_ops.exp(x).double() / torch.exp(x.double()) - 1).abs()
    assert rel.max().item() < 2.5e-7
    assert cpu_ops.exp(torch.zeros(3)).tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_ops_match_float64_reference(dtype: torch.dtype) -> None:
    torch.manual_seed(4)
    tol = 2e-6 if dtype == torch.float32 else 2e-2
    x, w = torch.randn(37, 96), torch.randn(80, 96)
    gate, up, norm_w = torch.randn(37, 80), torch.randn(37, 80), torch.randn(96)
    cos, sin = cpu_ops.rotary_tables(32, 64, 10000.0)
    heads = torch.randn(37, 3, 32)

    def check(fast, ref, *args) -> None:
        got = fast(*(a.to(dtype) for a in args)).double()
        want = ref(*(a.double() for a in args))
        assert ((got - want).abs() / (want.abs() + 1)).max().item() < tol * 10

    check(ops.linear, reference.linear, x, w)
    check(lambda a, b: ops.rms_norm(a, b, 1e-5), lambda a, b: reference.rms_norm(a, b, 1e-5),
          x, norm_w)
    check(ops.silu_and_mul, reference.silu_and_mul, gate, up)
    check(lambda a: ops.rotary(a, cos[:37], sin[:37]),
          lambda a: reference.rotary(a, cos[:37].double(), sin[:37].double()), heads)


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_matches_float64_reference(dtype: torch.dtype) -> None:
    q, k, v = qkv(150)
    scale = 32 ** -0.5
    got = ops.attention(q.to(dtype), k.to(dtype), v.to(dtype), scale).double()
    want = reference.attention(q.double(), k.double(), v.double(), scale)
    assert (got - want).abs().max().item() < (2e-6 if dtype == torch.float32 else 3e-2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_matches_teacher_forcing_bitwise(dtype: torch.dtype) -> None:
    q, k, v = (t.to(dtype) for t in qkv(200))
    positions = [0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 150, 199]
    assert decode_differs_from_teacher_forcing(ops.attention, q, k, v, positions) == []


@pytest.mark.parametrize("dtype", DTYPES)
def test_paged_attention_mixed_batch_matches_contiguous_bitwise(dtype: torch.dtype) -> None:
    """A step mixing a prefill chunk and decode tokens of other sequences, over a paged cache."""
    lengths, new_tokens = [5, 130, 64, 33, 1], [5, 1, 20, 1, 1]
    seqs = [tuple(t.to(dtype) for t in qkv(n, seed=n)) for n in lengths]
    cache, table = paged_cache([s[1] for s in seqs], [s[2] for s in seqs], block_size=32)
    q = torch.cat([s[0][-n:] for s, n in zip(seqs, new_tokens, strict=True)])
    positions = torch.cat([torch.arange(length - n, length)
                           for length, n in zip(lengths, new_tokens, strict=True)])
    starts = torch.tensor([0, *torch.tensor(new_tokens).cumsum(0).tolist()])
    plan = cpu_ops.plan_paged(starts, torch.tensor(lengths), positions, table, block_size=32)
    got = ops.paged_attention(q, cache, plan, 0.2)
    want = torch.cat([ops.attention(*s, 0.2)[-n:] for s, n in zip(seqs, new_tokens, strict=True)])
    assert torch.equal(got, want)
