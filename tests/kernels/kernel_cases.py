"""Inputs and checks shared by the three kernel backends' property tests (torch, compiled C++,
Triton), so each backend is held to the same properties on the same data."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from kernels import ops

DECODE_POSITIONS = (0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 149)


def rows_invariant(fn: Callable[[torch.Tensor], torch.Tensor], rows: torch.Tensor,
                   sizes: Sequence[int], seed: int = 0) -> list[int]:
    """Batch sizes at which some row differed from the full batch (random subsets and orders)."""
    generator = torch.Generator().manual_seed(seed)
    full = fn(rows)
    bad = []
    for m in sizes:
        pick = torch.randperm(rows.shape[0], generator=generator)[:m].to(rows.device)
        if not torch.equal(fn(rows[pick]), full[pick]):
            bad.append(m)
    return bad


def qkv(length: int, heads: int = 4, kv_heads: int = 2, dim: int = 32,
        seed: int = 5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random queries, keys and values of one sequence, with grouped KV heads."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(length, heads, dim, generator=generator)
    k = torch.randn(length, kv_heads, dim, generator=generator)
    v = torch.randn(length, kv_heads, dim, generator=generator)
    return q, k, v


def decode_differs_from_teacher_forcing(
    attention: Callable[..., torch.Tensor], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    positions: Sequence[int] = DECODE_POSITIONS,
) -> list[int]:
    """Positions whose one-token decode step is not bit-equal to the full causal pass."""
    full = attention(q, k, v, 0.2)
    return [p for p in positions
            if not torch.equal(attention(q[: p + 1], k[: p + 1], v[: p + 1], 0.2)[p], full[p])]


def paged_cache(keys: list[torch.Tensor], values: list[torch.Tensor], block_size: int,
                seed: int = 6, fill: float = 7.0,
                spare_columns: int = 0, write: Callable[..., None] = ops.write_paged_kv
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Scatter each sequence's K/V over randomly chosen cache blocks; return cache, block table.

    Unused cache slots hold `fill` (NaN catches a kernel that reads them); `spare_columns`
    out-of-range block ids pad the table (catches one that follows them).
    """
    kv_heads, dim = keys[0].shape[1:]
    blocks_per_seq = [math.ceil(k.shape[0] / block_size) for k in keys]
    total = sum(blocks_per_seq) + 3
    order = torch.randperm(total, generator=torch.Generator().manual_seed(seed)).tolist()
    cache = torch.full((total, 2, kv_heads, block_size, dim), fill, dtype=keys[0].dtype)
    table = torch.full((len(keys), max(blocks_per_seq) + spare_columns),
                       10**6 if spare_columns else 0, dtype=torch.int32)
    for seq, (k, v) in enumerate(zip(keys, values, strict=True)):
        table[seq, : blocks_per_seq[seq]] = torch.tensor(
            [order.pop() for _ in range(blocks_per_seq[seq])], dtype=torch.int32)
        slots = (table[seq].long()[torch.arange(k.shape[0]) // block_size] * block_size
                 + torch.arange(k.shape[0]) % block_size)
        write(cache, k, v, slots)
    return cache, table
