"""The REINFORCE loss with unclipped token-level importance sampling.

For response i with advantage A_i and model tokens t, the weight w_t = exp(logp_learner_t -
logp_behavior_t) corrects for the rollout having sampled with older weights. The loss is

    loss = -mean_i( mean_t( w_t * A_i ) )

and the gradient flows through w_t (d w_t = w_t * d logp_learner_t), so at lag 0 with matched
kernels (w_t == 1) it is exactly the plain REINFORCE gradient of mean_i(A_i * mean_t logp_t).
The alternatives in `LossConfig` (a truncation value, one weight per sequence, a KL penalty)
are switches that default off. Inputs hold model tokens only: the caller applies `loss_mask`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from agent_rl.learn.config import ISLevel, LossConfig

METHOD = LossConfig()
"""The objective as published: unclipped token-level IS, no KL term."""


def importance_weights(
    learner_logprobs: torch.Tensor, behavior_logprobs: torch.Tensor, is_level: ISLevel = "token"
) -> torch.Tensor:
    """Per-token weights p_learner / p_behavior, differentiable through the learner logprobs.

    With `is_level="sequence"` every token of the response gets the same weight, the likelihood
    ratio of the whole response, exp(sum_t log-ratio); its gradient on token t is that weight
    times d logp_t, so the response's mean over tokens stays a mean and a lag-0 step equals the
    token-level one (the plain exp(sum) would scale a response's gradient by its length).
    """
    log_ratio = learner_logprobs - behavior_logprobs
    if is_level == "sequence":
        sequence = torch.exp(log_ratio.sum().detach())
        return sequence * torch.exp(log_ratio - log_ratio.detach())
    return torch.exp(log_ratio)


def k3_kl(learner_logprobs: torch.Tensor, behavior_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(behavior || learner) from tokens the behavior policy sampled.

    With r = p_learner / p_behavior, k3 = (r - 1) - log r: unbiased, never negative, and exactly
    zero where the two policies agree on the token.
    """
    log_ratio = learner_logprobs - behavior_logprobs
    return torch.expm1(log_ratio) - log_ratio


def response_loss(
    learner_logprobs: torch.Tensor,
    behavior_logprobs: torch.Tensor,
    advantage: float,
    settings: LossConfig = METHOD,
) -> torch.Tensor:
    """-mean_t(w_t * A) for one response's model tokens (plus the KL term when switched on)."""
    if learner_logprobs.shape != behavior_logprobs.shape or learner_logprobs.dim() != 1:
        raise ValueError(
            "learner and behavior logprobs must be 1-D and the same length, got "
            f"{tuple(learner_logprobs.shape)} and {tuple(behavior_logprobs.shape)}"
        )
    if learner_logprobs.numel() == 0:
        return learner_logprobs.sum()
    behavior_logprobs = behavior_logprobs.to(learner_logprobs.dtype)
    weights = importance_weights(learner_logprobs, behavior_logprobs, settings.is_level)
    if settings.clip is not None:
        # Truncated IS: the value is min(w, c) and the gradient min(w, c) * d logp, so a
        # truncated token still teaches, at a bounded rate.
        weights = weights * (weights.clamp(max=settings.clip) / weights).detach()
    loss = -(weights * advantage).mean()
    if settings.kl_coef:
        # The k3 the learner logs as is/kl_k3: KL(behavior || learner), unbiased on the tokens
        # the behavior policy sampled; its gradient (w - 1) d logp pulls each weight towards 1.
        loss = loss + settings.kl_coef * k3_kl(learner_logprobs, behavior_logprobs).mean()
    return loss


def reinforce_loss(
    learner_logprobs: Sequence[torch.Tensor],
    behavior_logprobs: Sequence[torch.Tensor],
    advantages: Sequence[float],
    settings: LossConfig = METHOD,
) -> torch.Tensor:
    """The mean over responses of `response_loss`: each response counts once, whatever its size."""
    if not (len(learner_logprobs) == len(behavior_logprobs) == len(advantages)):
        raise ValueError(
            f"need one advantage and one behavior row per response, got {len(learner_logprobs)} "
            f"learner rows, {len(behavior_logprobs)} behavior rows, {len(advantages)} advantages"
        )
    if not advantages:
        raise ValueError("reinforce_loss needs at least one response")
    terms = [
        response_loss(learner, behavior, advantage, settings)
        for learner, behavior, advantage in zip(
            learner_logprobs, behavior_logprobs, advantages, strict=True
        )
    ]
    return torch.stack(terms).mean()
