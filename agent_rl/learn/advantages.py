"""Group-relative advantages: REINFORCE with the group mean as the baseline.

The G responses to one task share a baseline, so no value model is needed. A group whose
responses all got the same reward has zero advantage everywhere and so carries no gradient; the
learner still counts it (a run where most groups are flat is learning nothing, and that is worth
seeing on a chart).
"""

from __future__ import annotations

from collections.abc import Sequence


def group_advantages(rewards: Sequence[float]) -> list[float]:
    """A_i = r_i - mean(r): each response's reward against the mean reward of its group."""
    if not rewards:
        raise ValueError("a group needs at least one reward to compute advantages, got none")
    if not has_reward_variance(rewards):
        # Exact zeros: the mean of equal floats can differ from them in the last bit.
        return [0.0] * len(rewards)
    baseline = sum(rewards) / len(rewards)
    return [reward - baseline for reward in rewards]


def has_reward_variance(rewards: Sequence[float]) -> bool:
    """False when every response got the same reward, so every advantage is exactly zero."""
    return any(reward != rewards[0] for reward in rewards)
