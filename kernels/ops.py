"""The matched op set: one entry point per op, used by the learner and by the rollout alike.

Each op picks its backend from the input's device (CPU: the compiled `kernels.cpp_ops`, or the
pure-torch `kernels.cpu_ops` where the extension cannot be built or `AGENT_RL_KERNELS=torch`;
CUDA: `kernels.triton_ops`). When autograd needs a gradient, the forward still runs the matched kernel
and the backward differentiates the reference math in `kernels.reference`: only the forward has
to agree bit for bit with the rollout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from types import ModuleType

import torch

from kernels import cpp_ops, cpu_ops, reference
from kernels.errors import KernelsError


class BackendUnavailableError(KernelsError, RuntimeError):
    """No matched backend exists for the tensors' device."""


def backend(x: torch.Tensor) -> ModuleType:
    """The kernel module for x's device."""
    if x.device.type == "cpu":
        return cpp_ops if cpp_ops.available() else cpu_ops
    if x.device.type == "cuda":
        try:
            from kernels import triton_ops
        except ImportError as error:
            raise BackendUnavailableError(
                f"the Triton backend for CUDA tensors is not available ({error}); run the "
                "matched kernels on CPU tensors") from error
        return triton_ops
    raise BackendUnavailableError(
        f"no matched kernels for device {x.device}; use CPU tensors or a CUDA GPU with Triton"
    )


def _needs_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


class _MatchedForward(torch.autograd.Function):
    """Forward: the matched kernel. Backward: autograd through the reference math."""

    @staticmethod
    def forward(ctx, fast: Callable, ref: Callable, *inputs: torch.Tensor) -> torch.Tensor:
        ctx.ref = ref
        ctx.save_for_backward(*inputs)
        return fast(*inputs)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        saved = ctx.saved_tensors
        inputs = [_widened(t).detach().requires_grad_(t.requires_grad) for t in saved]
        wanted = [t for t in inputs if t.requires_grad]
        with torch.enable_grad():
            out = ctx.ref(*inputs)
        grads = iter(torch.autograd.grad(out, wanted, _widened(grad), allow_unused=True))
        return (None, None, *(next(grads).to(t.dtype) if t.requires_grad else None
                              for t in saved))


def _widened(t: torch.Tensor) -> torch.Tensor:
    """A bf16/fp16 CPU tensor as fp32 for the backward's reference math. torch's CPU bf16 GEMM
    runs 10-80x slower than fp32 on CPUs without native bf16 (AVX2: 1.7-17 GFLOP/s against
    110-150), and fp32 gives the gradient a full-precision accumulation; only the forward has to
    match the rollout, and it keeps its dtype."""
    if t.device.type == "cpu" and t.is_floating_point() and t.element_size() < 4:
        return t.float()
    return t


class _Linear(torch.autograd.Function):
    """Matched forward GEMM, plain backward GEMMs (no recompute needed for a linear map)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return backend(x).linear(x, weight)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        wide_grad = _widened(grad)
        grad_x = (wide_grad @ _widened(weight)).to(x.dtype) if ctx.needs_input_grad[0] else None
        grad_w = None
        if ctx.needs_input_grad[1]:
            grad_w = (wide_grad.reshape(-1, grad.shape[-1]).t()
                      @ _widened(x).reshape(-1, x.shape[-1])).to(weight.dtype)
        return grad_x, grad_w


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T, batch-invariant per row."""
    if _needs_grad(x, weight):
        return _Linear.apply(x, weight)
    return backend(x).linear(x, weight)


def forget_packed_weights() -> None:
    """Call after writing weights through `.data` (as vLLM's weight loaders do): the compiled
    GEMM's per-version weight packs cannot see such a write (`cpp_ops.packed_weight`)."""
    cpp_ops.forget_packed_weights()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama RMSNorm over the last dim."""
    fast = partial(backend(x).rms_norm, eps=eps)
    if _needs_grad(x, weight):
        return _MatchedForward.apply(fast, partial(reference.rms_norm, eps=eps), x, weight)
    return fast(x, weight)


def silu_and_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up (the Llama MLP's gated activation)."""
    fast = backend(gate).silu_and_mul
    if _needs_grad(gate, up):
        return _MatchedForward.apply(fast, reference.silu_and_mul, gate, up)
    return fast(gate, up)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding; cos/sin are the table rows of x's positions, (T, D/2)."""
    fast = backend(x).rotary
    if _needs_grad(x):
        return _MatchedForward.apply(fast, reference.rotary, x, cos, sin)
    return fast(x, cos, sin)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal self-attention over one contiguous sequence: q (T, heads, D), k/v (T, kv_heads, D).

    Gives each query the same bits as `paged_attention` does in a decode step.
    """
    fast = partial(backend(q).attention, scale=scale)
    if _needs_grad(q, k, v):
        return _MatchedForward.apply(fast, partial(reference.attention, scale=scale), q, k, v)
    return fast(q, k, v)


def packed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: Sequence[int],
                     scale: float) -> torch.Tensor:
    """Causal self-attention of several sequences packed back to back in one stream.

    q: (T, heads, D), k/v: (T, kv_heads, D) with T = lengths.sum(); each sequence attends over
    its own keys only, and each of its queries gets the bits `attention` gives the sequence alone.
    `lengths` are the sequences' token counts in stream order, as Python ints: each backend
    builds what it needs from them without reading a device tensor back.
    """
    fast = partial(backend(q).packed_attention, lengths=lengths, scale=scale)
    if _needs_grad(q, k, v):
        ref = partial(reference.packed_attention, lengths=lengths, scale=scale)
        return _MatchedForward.apply(fast, ref, q, k, v)
    return fast(q, k, v)


def plan_paged(query_start_loc: torch.Tensor, seq_lens: torch.Tensor, positions: torch.Tensor,
               block_table: torch.Tensor, block_size: int) -> cpu_ops.PagedPlan:
    """One forward's paged-attention metadata, built once and passed to every layer."""
    return cpu_ops.plan_paged(query_start_loc, seq_lens, positions, block_table, block_size)


def write_paged_kv(kv_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   slot_mapping: torch.Tensor) -> None:
    """Store new keys/values at their slots of a paged cache (blocks, 2, kv_heads, bs, D).

    The layout inside a block is the backend's own: write with this and read with
    `paged_attention` on the same backend.
    """
    backend(k).write_paged_kv(kv_cache, k, v, slot_mapping)


def paged_attention(q: torch.Tensor, kv_cache: torch.Tensor, plan: cpu_ops.PagedPlan,
                    scale: float) -> torch.Tensor:
    """Causal attention of packed queries over a paged KV cache (inference only)."""
    return backend(q).paged_attention(q, kv_cache, plan, scale)


def lm_head_logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """fp32 vocabulary projection: the logits the rollout's sampler sees."""
    if _needs_grad(hidden, weight):
        return _Linear.apply(hidden.float(), weight.float())
    return backend(hidden).lm_head_logits(hidden, weight)


def lm_head_logprobs(hidden: torch.Tensor, weight: torch.Tensor,
                     targets: torch.Tensor | None = None, temperature: float = 1.0
                     ) -> torch.Tensor:
    """fp32 lm_head, divided by the temperature, then fp32 log-softmax; with targets, the
    log-prob of each target token.

    vLLM's sampler divides fp32 logits by an fp32 temperature tensor; dividing by the same fp32
    value (not multiplying by its reciprocal) gives the same correctly rounded quotients.
    """
    logits = lm_head_logits(hidden, weight)
    if temperature != 1.0:
        logits = logits / torch.tensor([temperature], dtype=torch.float32, device=logits.device)
    logprobs = logits.log_softmax(dim=-1, dtype=torch.float32)
    if targets is None:
        return logprobs
    return logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
