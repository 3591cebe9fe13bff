"""The objective against numbers worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from agent_rl.learn.advantages import group_advantages, has_reward_variance
from agent_rl.learn.config import LossConfig
from agent_rl.learn.loss import importance_weights, k3_kl, reinforce_loss

# Group rewards [1, 0] -> advantages [+0.5, -0.5].
# Response 1: learner p = (0.5, 0.25), behavior p = (0.25, 0.25) -> w = (2, 1).
# Response 2: learner p = 0.5, behavior p = 0.5 -> w = 1.
LEARNER = [[math.log(0.5), math.log(0.25)], [math.log(0.5)]]
BEHAVIOR = [[math.log(0.25), math.log(0.25)], [math.log(0.5)]]


def _example(settings: LossConfig) -> tuple[torch.Tensor, list[torch.Tensor]]:
    learner = [torch.tensor(row, dtype=torch.float64, requires_grad=True) for row in LEARNER]
    behavior = [torch.tensor(row, dtype=torch.float64) for row in BEHAVIOR]
    loss = reinforce_loss(learner, behavior, group_advantages([1.0, 0.0]), settings)
    loss.backward()
    return loss, [row.grad for row in learner]


def test_advantage_is_reward_minus_group_mean() -> None:
    assert group_advantages([1.0, 0.0, 0.0, 1.0]) == [0.5, -0.5, -0.5, 0.5]
    assert group_advantages([0.3, 0.3, 0.3]) == [0.0, 0.0, 0.0]
    assert not has_reward_variance([0.3, 0.3, 0.3])
    assert has_reward_variance([0.3, 0.3, 0.31])


def test_unclipped_token_loss_matches_hand_computation() -> None:
    loss, grads = _example(LossConfig())
    # -mean(mean(2*0.5, 1*0.5), mean(1*-0.5)) = -mean(0.75, -0.5) = -0.125
    assert loss.item() == pytest.approx(-0.125, abs=1e-12)
    # d/dlogp of -(1/2)(1/T_i) w_t A_i = -(1/2)(1/T_i) w_t A_i (the weight carries the gradient)
    torch.testing.assert_close(grads[0], torch.tensor([-0.25, -0.125], dtype=torch.float64))
    torch.testing.assert_close(grads[1], torch.tensor([0.25], dtype=torch.float64))


def test_weights_are_not_clipped_by_default() -> None:
    learner = torch.tensor([math.log(0.9)], dtype=torch.float64)
    behavior = torch.tensor([math.log(0.001)], dtype=torch.float64)
    assert importance_weights(learner, behavior).item() == pytest.approx(900.0)
    loss = reinforce_loss([learner], [behavior], [1.0])
    assert loss.item() == pytest.approx(-900.0)


def test_truncated_weights_cap_value_and_gradient() -> None:
    loss, grads = _example(LossConfig(clip=1.5))
    # Response 1: w = (1.5, 1) -> mean 0.625; loss = -mean(0.625, -0.5)
    assert loss.item() == pytest.approx(-0.0625, abs=1e-12)
    torch.testing.assert_close(grads[0], torch.tensor([-0.1875, -0.125], dtype=torch.float64))


def test_sequence_level_weight_is_the_sequence_likelihood_ratio() -> None:
    loss, grads = _example(LossConfig(is_level="sequence"))
    # Response 1: one weight exp(log 2 + 0) = 2 on both tokens -> mean(w A) = 1.0
    assert loss.item() == pytest.approx(-(1.0 - 0.5) / 2, abs=1e-12)
    # Token t's gradient is w * d logp_t, averaged over the response's 2 tokens like token IS:
    # -(1/2) * (1/2) * 2 * 0.5 on each.
    torch.testing.assert_close(grads[0], torch.tensor([-0.25, -0.25], dtype=torch.float64))


def test_sequence_level_step_at_lag_0_equals_the_token_level_step() -> None:
    learner = torch.tensor([-1.0, -0.5, -2.0], dtype=torch.float64, requires_grad=True)
    grads = []
    for level in ("token", "sequence"):
        learner.grad = None
        reinforce_loss([learner], [learner.detach()], [0.7], LossConfig(is_level=level)).backward()
        grads.append(learner.grad.clone())
    torch.testing.assert_close(grads[0], grads[1])


def test_k3_kl_is_zero_on_policy_and_positive_off_policy() -> None:
    same = torch.tensor([-1.0, -2.0], dtype=torch.float64)
    assert k3_kl(same, same).abs().max().item() == 0.0
    kl = k3_kl(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)]))
    assert kl.item() == pytest.approx((2 - 1) - math.log(2))


def test_kl_term_adds_penalty_only_when_switched_on() -> None:
    base, _ = _example(LossConfig())
    with_kl, _ = _example(LossConfig(kl_coef=0.1))
    # k3(behavior || learner), the logged is/kl_k3, per token with r = p_l / p_b: response 1
    # tokens r = (2, 1).
    kl_response_1 = ((2 - 1) - math.log(2)) / 2
    assert with_kl.item() == pytest.approx(base.item() + 0.1 * kl_response_1 / 2, abs=1e-12)


def test_flat_group_contributes_no_gradient() -> None:
    learner = torch.tensor([-1.0, -0.5], dtype=torch.float64, requires_grad=True)
    behavior = torch.tensor([-1.2, -0.1], dtype=torch.float64)
    loss = reinforce_loss([learner], [behavior], group_advantages([1.0]))
    loss.backward()
    assert loss.item() == 0.0
    assert learner.grad.abs().max().item() == 0.0


def test_bad_settings_are_rejected_with_the_value_seen() -> None:
    with pytest.raises(ValueError, match="clip"):
        LossConfig(clip=0.0)
    with pytest.raises(ValueError, match="'bogus'"):
        LossConfig(is_level="bogus")  # type: ignore[arg-type]
