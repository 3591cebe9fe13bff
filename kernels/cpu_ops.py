"""Batch-invariant CPU kernels in plain torch.

Every op here gives a row the same bits whatever else is in the batch. Two rules make that hold:

1. Matrix products always run as GEMMs of one fixed shape: rows are cut into tiles of exactly
   `TILE_ROWS` rows (the tail padded with zeros), so the BLAS library never switches kernels or
   blockings with the batch size. Whether a row sits first or last in its tile does not change
   its bits (tested across M = 1..300, thread counts and dtypes).
2. Everything else is built from IEEE-exact elementwise steps (add, mul, div, sqrt, max,
   round) in a fixed order. torch's own `exp` is not used: its vectorized and scalar paths
   differ by an ulp and which one a value takes depends on the tensor's length and threading.
   Sums run as a fixed pairwise tree of elementwise adds instead of a library reduction.

Attention walks the keys in fixed blocks of `KEY_BLOCK` positions aligned to absolute key
positions, with an online softmax. A block that is fully masked for a query leaves its running
state bit-for-bit unchanged, so a query sees the same sequence of operations in a one-token
decode step as in a teacher-forced pass over the whole sequence.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import torch

TILE_ROWS = 16
KEY_BLOCK = 64

_LOG2E = 1.4426950408889634
# Cody-Waite split of ln 2: n * _LN2_HI is exact for |n| < 2**11.
_LN2_HI = 0.693145751953125
_LN2_LO = 1.428606765330187e-06
# Cephes expf minimax coefficients on [-ln2/2, ln2/2].
_EXP_COEFFS = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
               1.6666665459e-1, 5.0000001201e-1)
_EXP_MIN = -87.0  # below this exp underflows to subnormals; we return exactly 0
_EXP_MAX = 88.0  # 2**127 * 1.41 stays finite


def exp(x: torch.Tensor) -> torch.Tensor:
    """exp(x) in fp32 from exactly rounded steps only, so no value's bits depend on its neighbours.

    Max relative error about 1e-7; exp(0) is exactly 1. Inputs below -87 give about 1.6e-38
    rather than 0 (callers that need exact zeros, such as masked keys, zero them afterwards).
    """
    return exp_(x.float().clone() if x.dtype == torch.float32 else x.float())


def exp_(x: torch.Tensor) -> torch.Tensor:
    """In-place `exp` on an fp32 tensor: fewer large allocations in the attention loop."""
    x.clamp_(_EXP_MIN, _EXP_MAX)
    n = torch.mul(x, _LOG2E).round_()
    tmp = torch.mul(n, _LN2_HI)
    x.sub_(tmp)
    torch.mul(n, _LN2_LO, out=tmp)
    x.sub_(tmp)  # x now holds the reduced argument r, |r| <= ln2/2
    torch.mul(x, _EXP_COEFFS[0], out=tmp)
    for coeff in _EXP_COEFFS[1:]:
        tmp.add_(coeff).mul_(x)
    # tmp = r * (c0 r^5 + ... + c5); exp(r) = 1 + r + r * tmp
    tmp.mul_(x).add_(x).add_(1.0)
    scale = n.to(torch.int32).add_(127).bitwise_left_shift_(23).view(torch.float32)
    return tmp.mul_(scale)


def tree_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim as a fixed pairwise tree (zero-padded to a power of two)."""
    width = x.shape[-1]
    padded = 1 << max(width - 1, 0).bit_length()
    if padded != width:
        x = torch.nn.functional.pad(x, (0, padded - width))
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x[..., 0]


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T with every GEMM of shape (TILE_ROWS, K) x (K, N): one result per row, always."""
    *lead, k = x.shape
    rows = x.reshape(-1, k)
    m = rows.shape[0]
    n_tiles = -(-m // TILE_ROWS)
    padded = m % TILE_ROWS != 0 or not rows.is_contiguous()
    if padded:
        tmp = rows.new_zeros(n_tiles * TILE_ROWS, k)
        tmp[:m] = rows
        rows = tmp
    out = rows.new_empty(n_tiles * TILE_ROWS, weight.shape[0])
    weight_t = weight.t()
    for i in range(0, n_tiles * TILE_ROWS, TILE_ROWS):
        torch.mm(rows[i:i + TILE_ROWS], weight_t, out=out[i:i + TILE_ROWS])
    return out[:m].reshape(*lead, weight.shape[0])


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama RMSNorm, statistics in fp32 (as HF does), normalised row rounded to x's dtype."""
    x32 = x.float()
    mean_square = tree_sum(x32 * x32) / x.shape[-1]
    inv_rms = 1.0 / torch.sqrt(mean_square + eps)
    return weight * (x32 * inv_rms.unsqueeze(-1)).to(x.dtype)


def silu_and_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up, silu in fp32 rounded to the input dtype (as HF does)."""
    gate32 = gate.float()
    return (gate32 / (1.0 + exp(-gate32))).to(gate.dtype) * up


def rotary_tables(head_dim: int, max_positions: int, theta: float) -> tuple[torch.Tensor, ...]:
    """cos and sin for every position, (max_positions, head_dim/2) fp32, computed in float64.

    A table indexed by position gives a token the same values wherever it sits in a batch.
    """
    # Always on the CPU (models may be built under a meta-device context); moved on first use.
    steps = torch.arange(0, head_dim, 2, dtype=torch.float64, device="cpu")
    inv_freq = 1.0 / (theta ** (steps / head_dim))
    positions = torch.arange(max_positions, dtype=torch.float64, device="cpu")
    angles = positions[:, None] * inv_freq[None, :]
    return torch.cos(angles).float(), torch.sin(angles).float()


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half rotary embedding. x: (T, heads, D); cos/sin: (T, D/2) rows for x's positions."""
    x32 = x.float()
    half = x.shape[-1] // 2
    first, second = x32[..., :half], x32[..., half:]
    cos, sin = cos[:, None, :], sin[:, None, :]
    rotated = torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)
    return rotated.to(x.dtype)


def lm_head_logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The vocabulary projection in fp32, whatever the model dtype."""
    return linear(hidden.float(), weight.float() if weight.dtype != torch.float32 else weight)


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """fp32 log-softmax exactly as vLLM's sampler computes it, so both sides get the same bits.

    torch's row-wise log_softmax kernel treats each row alone (checked across batch sizes).
    """
    return logits.log_softmax(dim=-1, dtype=torch.float32)


@dataclass
class AttentionTiles:
    """Queries cut into tiles of TILE_ROWS rows; a tile never mixes sequences.

    token_index: (tiles, R) row of q each tile row holds (padding rows point at row 0).
    row_valid: (tiles, R) False for padding rows. positions: (tiles, R) absolute query
    positions (padding rows get 0). Tiles are sorted by their last position so the tiles that
    still need key block j always form a suffix.
    """

    token_index: torch.Tensor
    row_valid: torch.Tensor
    positions: torch.Tensor
    tile_last: torch.Tensor
    sequence: torch.Tensor  # (tiles,) which sequence each tile belongs to


def plan_tiles(query_start_loc: torch.Tensor, positions: torch.Tensor) -> AttentionTiles:
    """Cut the packed queries of several sequences into tiles (done once per forward)."""
    starts = query_start_loc.tolist()
    token_rows, sequence = [], []
    for seq, (start, end) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
        for tile_start in range(start, end, TILE_ROWS):
            token_rows.append((tile_start, min(tile_start + TILE_ROWS, end)))
            sequence.append(seq)
    device = positions.device
    offsets = torch.arange(TILE_ROWS, device=device)
    begin = torch.tensor([b for b, _ in token_rows], dtype=torch.long, device=device)
    end = torch.tensor([e for _, e in token_rows], dtype=torch.long, device=device)
    token_index = begin[:, None] + offsets[None, :]
    row_valid = token_index < end[:, None]
    token_index = torch.where(row_valid, token_index, 0)
    tile_positions = torch.where(row_valid, positions[token_index], 0)
    tile_last = tile_positions.amax(dim=1)
    order = torch.argsort(tile_last, stable=True)
    return AttentionTiles(token_index[order], row_valid[order], tile_positions[order],
                          tile_last[order],
                          torch.tensor(sequence, dtype=torch.long, device=device)[order])


def attend_tiles(q: torch.Tensor, positions: torch.Tensor, tile_last: torch.Tensor,
                 keys: torch.Tensor, values: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal attention for query tiles over per-tile keys, in fp32.

    q: (tiles, heads, R, D); positions: (tiles, R); tile_last: (tiles,) ascending;
    keys/values: (tiles, kv_heads, L, D) with L a multiple of KEY_BLOCK, key i at absolute
    position i, finite zeros past the sequence (masked keys still enter as 0 * v).
    Returns (tiles, heads, R, D) fp32.

    The query heads that share a KV head are stacked as rows, so every score GEMM has the fixed
    shape (group * R, D) x (D, KEY_BLOCK) and keys are never repeated per head.
    """
    n_tiles, heads, rows, dim = q.shape
    kv_heads = keys.shape[1]
    group_rows = heads // kv_heads * rows
    q = q.float().reshape(n_tiles, kv_heads, group_rows, dim)
    running_max = q.new_full((n_tiles, kv_heads, group_rows), -math.inf)
    running_sum = q.new_zeros((n_tiles, kv_heads, group_rows))
    acc = q.new_zeros((n_tiles, kv_heads, group_rows, dim))
    row_positions = positions[:, None, :].expand(n_tiles, heads // kv_heads, rows)
    row_positions = row_positions.reshape(n_tiles, 1, group_rows, 1)
    n_blocks = int(tile_last[-1].item()) // KEY_BLOCK + 1
    first_active = torch.searchsorted(
        tile_last, torch.arange(n_blocks, dtype=tile_last.dtype) * KEY_BLOCK).tolist()
    block_offsets = torch.arange(KEY_BLOCK)
    for block, first in enumerate(first_active):
        lo = block * KEY_BLOCK
        k_block = keys[first:, :, lo:lo + KEY_BLOCK].float()
        v_block = values[first:, :, lo:lo + KEY_BLOCK].float()
        scores = torch.matmul(q[first:], k_block.transpose(-1, -2)).mul_(scale)  # (t, kvh, GR, B)
        masked = (lo + block_offsets) > row_positions[first:]  # (t, 1, GR, B)
        scores.masked_fill_(masked, -math.inf)
        new_max = torch.maximum(running_max[first:], scores.amax(dim=-1))
        alpha = exp_(running_max[first:] - new_max)
        probs = exp_(scores.sub_(new_max[..., None])).masked_fill_(masked, 0.0)
        running_sum[first:] = running_sum[first:] * alpha + tree_sum(probs)
        acc[first:] = acc[first:] * alpha[..., None] + torch.matmul(probs, v_block)
        running_max[first:] = new_max
    out = acc / running_sum[..., None]
    return out.reshape(n_tiles, heads, rows, dim)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal self-attention of one contiguous sequence (the learner's teacher-forced pass).

    q: (T, heads, D); k, v: (T, kv_heads, D). Returns (T, heads, D) in q's dtype.
    """
    length = q.shape[0]
    tiles = plan_tiles(torch.tensor([0, length]), torch.arange(length))
    padded = -(-length // KEY_BLOCK) * KEY_BLOCK
    keys = _pad_keys(k, padded)[None].expand(tiles.token_index.shape[0], -1, -1, -1)
    values = _pad_keys(v, padded)[None].expand(tiles.token_index.shape[0], -1, -1, -1)
    return _run_tiles(q, tiles, keys, values, scale)


def packed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: Sequence[int],
                     scale: float) -> torch.Tensor:
    """`attention` of each of several sequences packed back to back in one stream."""
    return attend_each(attention, q, k, v, lengths, scale)


def attend_each(attention_fn: Callable[..., torch.Tensor], q: torch.Tensor, k: torch.Tensor,
                v: torch.Tensor, lengths: Sequence[int], scale: float) -> torch.Tensor:
    """One `attention_fn` call per packed sequence: on the CPU the row-wise ops and the GEMMs
    already run over the whole stream, so the per-sequence attention calls are all that is left."""
    sizes = list(lengths)
    return torch.cat([attention_fn(sq, sk, sv, scale) for sq, sk, sv in
                      zip(q.split(sizes), k.split(sizes), v.split(sizes), strict=True)])


def _pad_keys(k: torch.Tensor, padded: int) -> torch.Tensor:
    """(T, kv_heads, D) -> (kv_heads, padded, D) with zeros after T."""
    out = k.new_zeros(k.shape[1], padded, k.shape[2])
    out[:, :k.shape[0]] = k.transpose(0, 1)
    return out


def _run_tiles(q: torch.Tensor, tiles: AttentionTiles, keys: torch.Tensor,
               values: torch.Tensor, scale: float) -> torch.Tensor:
    q_tiles = q[tiles.token_index].transpose(1, 2)  # (tiles, heads, R, D)
    out_tiles = attend_tiles(q_tiles, tiles.positions, tiles.tile_last, keys, values, scale)
    out = q.new_empty(q.shape)
    valid = tiles.row_valid
    out[tiles.token_index[valid]] = out_tiles.transpose(1, 2)[valid].to(q.dtype)
    return out


@dataclass
class PagedPlan:
    """One forward's paged-attention metadata, shared by all layers and backends.

    The compiled kernels read the raw tensors; the torch and Triton kernels use the gather
    indices (`tiles`, `key_block`, `key_offset`, `key_valid`), built once on first use.
    """

    query_start_loc: torch.Tensor  # (S+1,) offsets of each sequence's queries in the packed q
    seq_lens: torch.Tensor  # (S,) keys of each sequence, the new tokens included
    positions: torch.Tensor  # (tokens,) absolute position of each query
    block_table: torch.Tensor  # (S, max_blocks) cache block of each sequence's i-th key block
    block_size: int

    @cached_property
    def tiles(self) -> AttentionTiles:
        return plan_tiles(self.query_start_loc, self.positions)

    @cached_property
    def key_valid(self) -> torch.Tensor:
        """(tiles, L) False past the tile's sequence length; L a multiple of KEY_BLOCK."""
        tile_lens = self.seq_lens.long().to(self.tiles.sequence.device)[self.tiles.sequence]
        padded = -(-int(tile_lens.max().item()) // KEY_BLOCK) * KEY_BLOCK
        return torch.arange(padded, device=tile_lens.device)[None, :] < tile_lens[:, None]

    @cached_property
    def key_block(self) -> torch.Tensor:
        """(tiles, L) cache block holding key position i of the tile's sequence."""
        key_pos = torch.arange(self.key_valid.shape[1], device=self.key_valid.device)
        table_col = torch.where(self.key_valid, key_pos[None, :] // self.block_size, 0)
        sequence = self.tiles.sequence
        rows = torch.arange(len(sequence), device=sequence.device)[:, None]
        return self.block_table.long().to(sequence.device)[sequence][rows, table_col]

    @cached_property
    def key_offset(self) -> torch.Tensor:
        """(tiles, L) slot of key position i inside its cache block."""
        key_pos = torch.arange(self.key_valid.shape[1], device=self.key_valid.device)
        return (key_pos % self.block_size)[None, :].expand_as(self.key_block)


def plan_paged(query_start_loc: torch.Tensor, seq_lens: torch.Tensor, positions: torch.Tensor,
               block_table: torch.Tensor, block_size: int) -> PagedPlan:
    """The metadata of a batch of sequences whose keys live in a paged cache."""
    return PagedPlan(query_start_loc, seq_lens, positions, block_table, block_size)


def write_paged_kv(kv_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   slot_mapping: torch.Tensor) -> None:
    """Store new keys/values at their slots. kv_cache: (blocks, 2, kv_heads, block_size, D)."""
    block_size = kv_cache.shape[3]
    slots = slot_mapping.long()
    keep = slots >= 0
    slots, k, v = slots[keep], k[keep], v[keep]
    block, offset = slots // block_size, slots % block_size
    kv_cache[block, 0, :, offset] = k.to(kv_cache.dtype)
    kv_cache[block, 1, :, offset] = v.to(kv_cache.dtype)


def paged_attention(q: torch.Tensor, kv_cache: torch.Tensor, plan: PagedPlan,
                    scale: float) -> torch.Tensor:
    """Causal attention of packed queries over a paged KV cache (the rollout's decode/prefill).

    q: (tokens, heads, D); kv_cache: (blocks, 2, kv_heads, block_size, D).
    """
    valid = plan.key_valid[:, None, :, None]
    keys = kv_cache[plan.key_block, 0, :, plan.key_offset]  # (tiles, L, kv_heads, D)
    values = kv_cache[plan.key_block, 1, :, plan.key_offset]
    keys = torch.where(valid, keys.transpose(1, 2), 0.0)
    values = torch.where(valid, values.transpose(1, 2), 0.0)
    return _run_tiles(q, plan.tiles, keys, values, scale)
