"""Batch-invariant Triton kernels: the CUDA half of the matched op set (`kernels.ops`).

Every kernel gives a row the same bits whatever else is in the batch, by construction:

1. Matrix products use one tile shape per dtype (BLOCK_M x BLOCK_N outputs per program, K walked
   in BLOCK_K steps from 0 upwards, no split-K, no autotuning). Rows only meet inside a tile,
   where each output element still depends on its own row alone. fp32 operands are multiplied
   in IEEE fp32, never TF32.
2. Row reductions (RMSNorm, log-softmax) run one program per row with a block size fixed by the
   row length.
3. Attention walks keys in `KEY_BLOCK` blocks aligned to absolute key positions with an online
   softmax, in one kernel that finds every key through a block table: a contiguous sequence is
   a cache of one page holding all its keys, so the learner's teacher-forced pass and the
   rollout's decode step over vLLM's paged cache run the same compiled code. A block that is
   fully masked for a query leaves its running state bit for bit unchanged, so a query gets the
   same bits however far its tile's other queries reach.

Triton compiles a separate variant when an integer argument is 1 or a multiple of 16 or a pointer
is 16-byte aligned, and a variant may lay out a load, and with it a reduction, differently. So the
GEMM and attention kernels never specialize on an argument that changes with the batch, and
inputs are made contiguous and aligned: the batch never picks the variant of a kernel that
reduces. (Elementwise kernels may vary: each output element's arithmetic is the same in all.)

With TRITON_INTERPRET=1 set before triton is imported, the same kernels run on CPU tensors (how
the tests check them without a GPU). The interpreter runs `tl.dot` through numpy's matmul, that
is the host's BLAS, whose kernel and blocking depend on the CPU model and on where a row sits in
the tile: a row's bits moved with its position on some CPUs and not on others. So under the
interpreter every tile product is an explicit broadcast multiply and a sum over k, each output
element reduced the same way wherever its row sits, and bf16 operands are widened to fp32 first
(the interpreter's `tl.dot` would multiply them as raw integers). On a GPU the products go to
`tl.dot` (tensor cores for bf16): only the GPU run checks the compiled reduction order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import torch
import triton
import triton.language as tl

from kernels.cpu_ops import KEY_BLOCK, TILE_ROWS, AttentionTiles, PagedPlan
from kernels.cpu_ops import write_paged_kv as write_paged_kv  # keys as rows, as cpu_ops

INTERPRETING = bool(triton.knobs.runtime.interpret)



@dataclass(frozen=True)
class MatmulTiles:
    """One GEMM launch configuration. Only block_k and the MMA's dtype fix a row's reduction
    order; the rest decides speed. Chosen once per dtype, never by the batch size."""

    block_m: int
    block_n: int
    block_k: int
    warps: int = 4
    stages: int = 3
    group_m: int = 8  # row tiles that walk the columns together, for L2 reuse of the weight


# bf16: 128x128 tiles, 8 warps (`agent-rl bench kernels --device cuda` on an H200: 0.61-0.78x of
# cuBLAS at 16384 rows against 0.41-0.49x for 64x64, about even at 1024, 64x64 ahead at 64 rows).
MATMUL_TILES = {
    torch.float32: MatmulTiles(64, 64, 32),
    torch.bfloat16: MatmulTiles(128, 128, 64, warps=8),
    torch.float16: MatmulTiles(128, 128, 64, warps=8),
}
_ELEMENTWISE_BLOCK = 1024
_SOFTMAX_BLOCK = 1024
_ALIGN_BYTES = 16


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """t as a contiguous tensor whose data starts on a 16-byte boundary (a copy only if needed)."""
    if t.is_contiguous() and t.data_ptr() % _ALIGN_BYTES == 0:
        return t
    out = torch.empty(t.shape, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


@triton.jit
def _dot(a, b, acc, EXPLICIT_SUM: tl.constexpr):
    """acc + a @ b, accumulated in fp32; fp32 operands in IEEE fp32 (TF32 would lose bits).

    EXPLICIT_SUM is set under the interpreter only: the product is then a broadcast multiply and
    a sum over k (the host BLAS behind the interpreter's `tl.dot` is not row-invariant).
    """
    if EXPLICIT_SUM:
        products = a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :]
        return acc + tl.sum(products, axis=1)
    return tl.dot(a, b, acc, input_precision="ieee")


@triton.jit(do_not_specialize=["m"])
def _matmul_kernel(x_ptr, w_ptr, out_ptr, m, n, k,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr, EXPLICIT_SUM: tl.constexpr):
    """out (m, n) = x (m, k) @ w (n, k).T; every tensor contiguous. Programs take output tiles
    in groups of GROUP_M row tiles per column sweep (which program computes a tile never
    changes how it is computed)."""
    row_tiles, col_tiles = tl.cdiv(m, BLOCK_M), tl.cdiv(n, BLOCK_N)
    pid = tl.program_id(0)
    per_group = GROUP_M * col_tiles
    first_row_tile = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(row_tiles - first_row_tile, GROUP_M)
    row_tile = first_row_tile + (pid % per_group) % group_rows
    col_tile = (pid % per_group) // group_rows
    rows = row_tile * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = col_tile * BLOCK_N + tl.arange(0, BLOCK_N)
    row_offsets = rows.to(tl.int64)[:, None] * k
    col_offsets = cols.to(tl.int64)[None, :] * k
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, k, BLOCK_K):
        ks = start + tl.arange(0, BLOCK_K)
        a = tl.load(x_ptr + row_offsets + ks[None, :],
                    mask=(rows[:, None] < m) & (ks[None, :] < k), other=0.0)
        b = tl.load(w_ptr + col_offsets + ks[:, None],
                    mask=(cols[None, :] < n) & (ks[:, None] < k), other=0.0)
        acc = _dot(a, b, acc, EXPLICIT_SUM)
    out_offsets = rows.to(tl.int64)[:, None] * n + cols[None, :]
    tl.store(out_ptr + out_offsets, acc.to(out_ptr.dtype.element_ty),
             mask=(rows[:, None] < m) & (cols[None, :] < n))


def linear(x: torch.Tensor, weight: torch.Tensor, tiles: MatmulTiles | None = None
           ) -> torch.Tensor:
    """x @ weight.T, batch-invariant per row; output in x's dtype, accumulated in fp32.

    `tiles` overrides the dtype's configuration (benchmarks compare candidates with it); the
    matched ops never pass it.
    """
    if x.dtype != weight.dtype:
        raise TypeError(f"linear needs x and weight of one dtype, got {x.dtype} and "
                        f"{weight.dtype}; cast one of them first")
    if x.dtype not in MATMUL_TILES:
        raise TypeError(f"no matched GEMM for dtype {x.dtype}; use one of "
                        f"{sorted(str(d) for d in MATMUL_TILES)}")
    *lead, k = x.shape
    n = weight.shape[0]
    rows = _aligned(x.reshape(-1, k))
    weight = _aligned(weight)
    m = rows.shape[0]
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    if m > 0:
        t = tiles or MATMUL_TILES[x.dtype]
        grid = (triton.cdiv(m, t.block_m) * triton.cdiv(n, t.block_n),)
        _matmul_kernel[grid](rows, weight, out, m, n, k, BLOCK_M=t.block_m, BLOCK_N=t.block_n,
                             BLOCK_K=t.block_k, GROUP_M=t.group_m, EXPLICIT_SUM=INTERPRETING,
                             num_warps=t.warps, num_stages=t.stages)
    return out.reshape(*lead, n)


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, width, eps, BLOCK: tl.constexpr):
    """One program per row: fp32 statistics, the normalised row rounded to x's dtype."""
    row = tl.program_id(0).to(tl.int64) * width
    cols = tl.arange(0, BLOCK)
    inside = cols < width
    x = tl.load(x_ptr + row + cols, mask=inside, other=0.0).to(tl.float32)
    mean_square = tl.sum(x * x, axis=0) / width
    inv_rms = 1.0 / tl.sqrt_rn(mean_square + eps)
    normed = (x * inv_rms).to(x_ptr.dtype.element_ty).to(tl.float32)
    weight = tl.load(w_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    tl.store(out_ptr + row + cols, (weight * normed).to(out_ptr.dtype.element_ty), mask=inside)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama RMSNorm over the last dim (as HF computes it: fp32 statistics)."""
    width = x.shape[-1]
    rows = _aligned(x.reshape(-1, width))
    out = torch.empty(rows.shape, dtype=torch.promote_types(x.dtype, weight.dtype),
                      device=x.device)
    if rows.shape[0] > 0:
        _rms_norm_kernel[(rows.shape[0],)](rows, _aligned(weight), out, width, eps,
                                           BLOCK=triton.next_power_of_2(width))
    return out.reshape(x.shape)


@triton.jit
def _silu_and_mul_kernel(gate_ptr, up_ptr, out_ptr, size, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < size
    gate = tl.load(gate_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    up = tl.load(up_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    silu = (gate / (1.0 + tl.exp(-gate))).to(gate_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + offsets, (silu * up).to(out_ptr.dtype.element_ty), mask=inside)


def silu_and_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up, silu in fp32 rounded to the input dtype (as HF does)."""
    if gate.shape != up.shape:
        raise ValueError(f"silu_and_mul needs gate and up of one shape, got {tuple(gate.shape)} "
                         f"and {tuple(up.shape)}")
    gate, up = _aligned(gate), _aligned(up)
    out = torch.empty(gate.shape, dtype=torch.promote_types(gate.dtype, up.dtype),
                      device=gate.device)
    size = gate.numel()
    if size > 0:
        grid = (triton.cdiv(size, _ELEMENTWISE_BLOCK),)
        _silu_and_mul_kernel[grid](gate, up, out, size, BLOCK=_ELEMENTWISE_BLOCK)
    return out


@triton.jit
def _rotary_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, heads, half,
                   BLOCK_HEADS: tl.constexpr, BLOCK_HALF: tl.constexpr):
    """One program per token: rotate-half over all its heads, in fp32."""
    token = tl.program_id(0).to(tl.int64)
    head = tl.arange(0, BLOCK_HEADS)[:, None]
    col = tl.arange(0, BLOCK_HALF)[None, :]
    inside = (head < heads) & (col < half)
    first_at = token * heads * 2 * half + head * 2 * half + col
    first = tl.load(x_ptr + first_at, mask=inside, other=0.0).to(tl.float32)
    second = tl.load(x_ptr + first_at + half, mask=inside, other=0.0).to(tl.float32)
    cos = tl.load(cos_ptr + token * half + col, mask=col < half, other=0.0)
    sin = tl.load(sin_ptr + token * half + col, mask=col < half, other=0.0)
    dtype = out_ptr.dtype.element_ty
    tl.store(out_ptr + first_at, (first * cos - second * sin).to(dtype), mask=inside)
    tl.store(out_ptr + first_at + half, (second * cos + first * sin).to(dtype), mask=inside)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half rotary embedding. x: (T, heads, D); cos/sin: (T, D/2) rows of x's positions."""
    tokens, heads, dim = x.shape
    if cos.shape != (tokens, dim // 2) or sin.shape != cos.shape:
        raise ValueError(f"rotary needs cos/sin of shape {(tokens, dim // 2)}, got "
                         f"{tuple(cos.shape)} and {tuple(sin.shape)}")
    x = _aligned(x)
    cos, sin = (_aligned(t.to(device=x.device, dtype=torch.float32)) for t in (cos, sin))
    out = torch.empty_like(x)
    if tokens > 0:
        _rotary_kernel[(tokens,)](x, cos, sin, out, heads, dim // 2,
                                  BLOCK_HEADS=triton.next_power_of_2(heads),
                                  BLOCK_HALF=triton.next_power_of_2(dim // 2))
    return out


# The block table's shape and the block size change with the batch (a contiguous sequence is one
# page of T keys); the k/v strides are the model's and the cache's, the same in every launch.
@triton.jit(do_not_specialize=["table_stride", "block_size"])
def _attention_kernel(q_ptr, k_ptr, v_ptr, out_ptr,
                      token_index_ptr, row_valid_ptr, positions_ptr, tile_last_ptr,
                      tile_sequence_ptr, seq_lens_ptr, block_table_ptr, table_stride, block_size,
                      stride_key_page, stride_key_head, stride_key_slot,
                      stride_value_page, stride_value_head, stride_value_slot,
                      heads, dim, scale,
                      GROUP: tl.constexpr, ROWS: tl.constexpr, TILE: tl.constexpr,
                      BLOCK_D: tl.constexpr, KEYS: tl.constexpr, EXPLICIT_SUM: tl.constexpr):
    """One program per (query tile, KV head): the tile's tokens x the head group, as rows.

    Row r is token slot r // GROUP of the tile and query head kv_head * GROUP + r % GROUP, so
    every score product has the fixed shape (ROWS, D) x (D, KEYS) and keys are read once per
    group. Key i of the tile's sequence lives in slot i % block_size of page
    block_table[sequence, i // block_size] of k/v.
    """
    tile = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    r = tl.arange(0, ROWS)
    slot = r // GROUP
    head = kv_head * GROUP + r % GROUP
    in_tile = slot < TILE
    row_ok = in_tile & (tl.load(row_valid_ptr + tile * TILE + slot, mask=in_tile, other=0) != 0)
    token = tl.load(token_index_ptr + tile * TILE + slot, mask=row_ok, other=0).to(tl.int64)
    position = tl.load(positions_ptr + tile * TILE + slot, mask=row_ok, other=0)
    d = tl.arange(0, BLOCK_D)
    q_at = (token * heads + head)[:, None] * dim + d[None, :]
    q = tl.load(q_ptr + q_at, mask=row_ok[:, None] & (d[None, :] < dim), other=0.0)
    sequence = tl.load(tile_sequence_ptr + tile).to(tl.int64)
    seq_len = tl.load(seq_lens_ptr + sequence)

    running_max = tl.full((ROWS,), float("-inf"), tl.float32)
    running_sum = tl.zeros((ROWS,), tl.float32)
    acc = tl.zeros((ROWS, BLOCK_D), tl.float32)
    n_blocks = tl.load(tile_last_ptr + tile) // KEYS + 1
    for block in range(0, n_blocks):
        key_pos = block * KEYS + tl.arange(0, KEYS)
        key_ok = key_pos < seq_len
        page = tl.load(block_table_ptr + sequence * table_stride + key_pos // block_size,
                       mask=key_ok, other=0).to(tl.int64)
        page_slot = (key_pos % block_size).to(tl.int64)
        k_at = page * stride_key_page + kv_head * stride_key_head + page_slot * stride_key_slot
        keys_t = tl.load(k_ptr + k_at[None, :] + d[:, None],
                         mask=key_ok[None, :] & (d[:, None] < dim), other=0.0)
        scores = _dot(q, keys_t, tl.zeros((ROWS, KEYS), tl.float32), EXPLICIT_SUM) * scale
        visible = (key_pos[None, :] <= position[:, None]) & key_ok[None, :]
        scores = tl.where(visible, scores, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        # alpha is exactly 1 unless the max grew: a fully masked block changes nothing.
        alpha = tl.where(new_max > running_max, tl.exp(running_max - new_max), 1.0)
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)  # padding rows see no key
        probs = tl.exp(scores - shift[:, None])
        running_sum = running_sum * alpha + tl.sum(probs, axis=1)
        v_at = (page * stride_value_page + kv_head * stride_value_head
                + page_slot * stride_value_slot)
        values = tl.load(v_ptr + v_at[:, None] + d[None, :],
                         mask=key_ok[:, None] & (d[None, :] < dim), other=0.0)
        acc = _dot(probs.to(values.dtype), values, acc * alpha[:, None], EXPLICIT_SUM)
        running_max = new_max
    out = acc / running_sum[:, None]
    tl.store(out_ptr + q_at, out.to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None] & (d[None, :] < dim))


def _attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, tiles: AttentionTiles,
            seq_lens: torch.Tensor, block_table: torch.Tensor, block_size: int,
            scale: float) -> torch.Tensor:
    """Launch the attention kernel.

    keys/values: (pages, kv_heads, block_size, D) views of any strides but a contiguous last dim
    (a cache is never copied); the tiles' key positions are looked up through block_table.
    """
    tokens, heads, dim = q.shape
    kv_heads = keys.shape[1]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads cannot share {kv_heads} KV heads evenly")
    if keys.stride(-1) != 1 or values.stride(-1) != 1:
        raise ValueError("attention needs keys/values whose last dim is contiguous; got strides "
                         f"{keys.stride()} and {values.stride()}")
    q = _aligned(q)
    out = torch.empty_like(q)
    n_tiles = tiles.token_index.shape[0]
    if n_tiles == 0:
        return out
    group = heads // kv_heads
    table = _aligned(block_table.to(device=q.device, dtype=torch.int32))
    metadata = [_aligned(t.to(device=q.device, dtype=torch.int32)) for t in (
        tiles.token_index, tiles.row_valid, tiles.positions, tiles.tile_last, tiles.sequence,
        seq_lens)]
    _attention_kernel[(n_tiles, kv_heads)](
        q, keys, values, out, *metadata, table, table.stride(0), block_size,
        keys.stride(0), keys.stride(1), keys.stride(2),
        values.stride(0), values.stride(1), values.stride(2),
        heads, dim, scale,
        GROUP=group, ROWS=max(16, triton.next_power_of_2(TILE_ROWS * group)), TILE=TILE_ROWS,
        BLOCK_D=max(16, triton.next_power_of_2(dim)), KEYS=KEY_BLOCK,
        EXPLICIT_SUM=INTERPRETING)
    return out


def _packed_tiles(lengths: Sequence[int], device: torch.device) -> AttentionTiles:
    """TILE_ROWS-token tiles over sequences packed back to back, each sequence at positions
    0..length-1 and starting a new tile: a tile never mixes sequences. Built on `device` from
    the lengths alone, with no loop over sequences and nothing read back from the device."""
    tiles_per_sequence = [-(-length // TILE_ROWS) for length in lengths]
    n_tiles = sum(tiles_per_sequence)
    as_tensor = partial(torch.tensor, dtype=torch.long, device=device)
    lengths_t, tiles_t = as_tensor(list(lengths)), as_tensor(tiles_per_sequence)
    sequence = torch.repeat_interleave(torch.arange(len(lengths), device=device), tiles_t,
                                       output_size=n_tiles)
    first_tile = torch.cumsum(tiles_t, 0) - tiles_t
    tile_in_sequence = torch.arange(n_tiles, device=device) - first_tile[sequence]
    position = (tile_in_sequence[:, None] * TILE_ROWS
                + torch.arange(TILE_ROWS, device=device)[None, :])
    row_valid = position < lengths_t[sequence][:, None]
    position = torch.where(row_valid, position, 0)
    first_token = torch.cumsum(lengths_t, 0) - lengths_t
    token = torch.where(row_valid, first_token[sequence][:, None] + position, 0)
    return AttentionTiles(token, row_valid, position, position.amax(dim=1), sequence)


def packed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: Sequence[int],
                     scale: float) -> torch.Tensor:
    """Causal self-attention of sequences packed back to back, in one launch.

    q: (T, heads, D); k, v: (T, kv_heads, D); lengths: token counts in stream order. The stream
    is presented as a cache of T one-token pages and sequence s's block table lists its own
    tokens' pages, so each query walks the same key blocks, in the same order, as in a decode
    step over vLLM's paged cache (the block size changes addresses only, never the reduction).
    """
    if not lengths or max(lengths) == 0:
        return torch.empty_like(q)
    k, v = _aligned(k), _aligned(v)
    # (T, kv_heads, D) seen as T pages of one slot: (pages, kv_heads, block_size=1, D).
    keys = k.as_strided((k.shape[0], k.shape[1], 1, k.shape[2]),
                        (k.stride(0), k.stride(1), k.stride(0), 1))
    values = v.as_strided((v.shape[0], v.shape[1], 1, v.shape[2]),
                          (v.stride(0), v.stride(1), v.stride(0), 1))
    first_token = [0]
    for length in lengths[:-1]:
        first_token.append(first_token[-1] + length)
    block_table = (torch.tensor(first_token, device=q.device)[:, None]
                   + torch.arange(max(lengths), device=q.device)[None, :])
    seq_lens = torch.tensor(list(lengths), dtype=torch.int32, device=q.device)
    return _attend(q, keys, values, _packed_tiles(lengths, q.device), seq_lens, block_table, 1,
                   scale)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal self-attention of one contiguous sequence (the learner's teacher-forced pass).

    q: (T, heads, D); k, v: (T, kv_heads, D). Each query gets the bits `paged_attention` gives
    it in a decode step (see `packed_attention`, of which this is the one-sequence case).
    """
    return packed_attention(q, k, v, [q.shape[0]], scale)


def paged_attention(q: torch.Tensor, kv_cache: torch.Tensor, plan: PagedPlan,
                    scale: float) -> torch.Tensor:
    """Causal attention of packed queries over a paged KV cache (the rollout's decode/prefill).

    q: (tokens, heads, D); kv_cache: (blocks, 2, kv_heads, block_size, D), any strides with a
    contiguous last dim (so a permuted view of vLLM's CUDA cache layout serves as is); `plan`
    from `kernels.cpu_ops.plan_paged` (its tensors may live on either device).
    """
    return _attend(q, kv_cache[:, 0], kv_cache[:, 1], plan.tiles, plan.seq_lens,
                   plan.block_table, plan.block_size, scale)


def lm_head_logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The vocabulary projection in fp32 (IEEE fp32 products), whatever the model dtype."""
    return linear(hidden.float(), weight.float() if weight.dtype != torch.float32 else weight)


@triton.jit
def _log_softmax_kernel(x_ptr, out_ptr, width, BLOCK: tl.constexpr):
    """One program per row; each of BLOCK lanes keeps its own running max and sum over the row's
    chunks, and the lanes are combined once at the end: a fixed order for a given width."""
    row = tl.program_id(0).to(tl.int64) * width
    lanes = tl.arange(0, BLOCK)
    lane_max = tl.full((BLOCK,), float("-inf"), tl.float32)
    lane_sum = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, width, BLOCK):
        inside = start + lanes < width
        x = tl.load(x_ptr + row + start + lanes, mask=inside, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(lane_max, x)
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        lane_sum = lane_sum * tl.exp(lane_max - shift) + tl.exp(x - shift)
        lane_max = new_max
    row_max = tl.max(lane_max, axis=0)
    log_sum = tl.log(tl.sum(lane_sum * tl.exp(lane_max - row_max), axis=0))
    for start in range(0, width, BLOCK):
        inside = start + lanes < width
        x = tl.load(x_ptr + row + start + lanes, mask=inside, other=0.0).to(tl.float32)
        tl.store(out_ptr + row + start + lanes, (x - row_max) - log_sum, mask=inside)


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """fp32 log-softmax over the last dim, one program per row (batch-invariant by construction).

    vLLM's sampler computes torch's log_softmax; `kernels.ops.lm_head_logprobs` uses that one so
    that both sides agree. This kernel is for callers that control both sides.
    """
    width = logits.shape[-1]
    rows = _aligned(logits.reshape(-1, width))
    out = torch.empty(rows.shape, dtype=torch.float32, device=logits.device)
    if rows.shape[0] > 0:
        _log_softmax_kernel[(rows.shape[0],)](rows, out, width,
                                              BLOCK=min(_SOFTMAX_BLOCK,
                                                        triton.next_power_of_2(width)))
    return out.reshape(logits.shape)
