"""Reference math for each matched op: plain torch, any dtype (tests run it in float64).

The learner's backward pass differentiates these (only the forward has to match the rollout),
and the tests compare the matched kernels against them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.linear(x, weight)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = torch.promote_types(x.dtype, torch.float32)
    x_wide = x.to(dtype)
    inv_rms = torch.rsqrt(x_wide.pow(2).mean(-1, keepdim=True) + eps)
    return weight * (x_wide * inv_rms).to(x.dtype)


def silu_and_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    cos, sin = cos[:, None, :].to(x.dtype), sin[:, None, :].to(x.dtype)
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal attention of one sequence. q: (T, heads, D); k, v: (T, kv_heads, D).

    torch's SDPA: its math path in float64 for the tests, its flash kernels (and their fast
    backward) for the learner's gradients on a GPU. KV heads are repeated up front: with
    `enable_gqa` SDPA may fall back to its quadratic-memory math path.
    """
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                         v.transpose(0, 1)[None], is_causal=True, scale=scale)
    return out[0].transpose(0, 1)


def packed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: Sequence[int],
                     scale: float) -> torch.Tensor:
    """`attention` of each of several sequences packed back to back."""
    sizes = list(lengths)
    return torch.cat([attention(sq, sk, sv, scale) for sq, sk, sv in
                      zip(q.split(sizes), k.split(sizes), v.split(sizes), strict=True)])


def lm_head_logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    dtype = torch.promote_types(hidden.dtype, torch.float32)
    return F.linear(hidden.to(dtype), weight.to(dtype))
