"""What one update reports beside its loss: importance weights and KL, token lags, and the
reward, length and tool-use charts of its groups (training's and evaluation's tool-use counts
share `agent_rl.trajectory.tool_calls`)."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import torch

from agent_rl.trajectory import Group, tool_calls


def weight_metrics(weights: list[torch.Tensor], kl: list[torch.Tensor],
                   lag0: list[torch.Tensor]) -> dict[str, float]:
    """IS weight statistics; `is/lag0_*` over the tokens whose whole turn was sampled with the
    very weights the learner holds (`agent_rl.learn.samples.lag0_tokens`), where any deviation from 1 is
    kernel mismatch alone (0 with matched kernels), apart from the weight lag the other tokens
    carry."""
    if not weights:
        return {}
    w = torch.cat(weights)
    median = float(w.median())
    at_lag0 = w[torch.cat(lag0)]
    lag0 = {"is/lag0_tokens": int(at_lag0.numel())}
    if at_lag0.numel():
        lag0["is/lag0_max_abs_log"] = float(at_lag0.log().abs().max())
    return {
        **lag0,
        "is/max": float(w.max()),
        "is/min": float(w.min()),
        "is/median": median,
        "is/mean": float(w.mean()),
        "is/max_over_median": float(w.max()) / median if median > 0 else math.inf,
        "is/kl_k3": float(torch.cat(kl).mean()),
        "is/tokens": int(w.numel()),
    }


LAG_SHARE_THRESHOLDS = (16, 32, 48)  # `lag/share_ge_N`: how much of an update is far behind


def lag_metrics(lags: torch.Tensor) -> dict[str, Any]:
    """Lag of every sampled token of the update: mean, max, histogram, and the share at lag
    >= 16, 32 and 48 (the method's lag-64 setting lives there)."""
    if not lags.numel():
        return {}
    histogram = Counter(lags.tolist())
    return {
        "lag/mean": float(lags.double().mean()),
        "lag/max": int(lags.max()),
        "lag/hist": {str(lag): count for lag, count in sorted(histogram.items())},
        **{f"lag/share_ge_{threshold}": float((lags >= threshold).double().mean())
           for threshold in LAG_SHARE_THRESHOLDS},
    }


def group_metrics(groups: list[Group]) -> dict[str, float]:
    """Reward and length charts over every episode of `groups` (of a segmented episode, its
    last segment: it carries the episode's end and totals)."""
    trajectories = [t for group in groups for t in group.episode_ends]
    rewards = torch.tensor([t.reward for t in trajectories], dtype=torch.float64)
    end_reasons = Counter(t.end_reason for t in trajectories)
    return {
        "charts/reward_mean": float(rewards.mean()),
        "charts/reward_std": float(rewards.std()) if len(rewards) > 1 else 0.0,
        "charts/groups": len(groups),
        "charts/responses": len(trajectories),
        "charts/model_tokens_mean": sum(t.num_model_tokens for t in trajectories)
        / len(trajectories),
        "charts/episode_tokens_mean": sum(len(t.token_ids) for t in trajectories)
        / len(trajectories),
        "charts/turns_mean": sum(t.num_turns for t in trajectories) / len(trajectories),
        # tool use: calls of tools other than `answer` per episode, and the share that made one
        "charts/tool_calls_mean": sum(map(tool_calls, trajectories)) / len(trajectories),
        "charts/tool_use_share": sum(tool_calls(t) > 0 for t in trajectories) / len(trajectories),
        # what a format penalty (envs.format_penalty) took off the reward: reward_mean plus this
        # is the task's own reward
        "charts/format_penalty_mean": sum(t.info.get("format_penalty_total", 0.0)
                                          for t in trajectories) / len(trajectories),
        # what an env latency profile (envs.latency) made each episode wait, in all
        "perf/env_latency_s_mean": sum(t.info.get("env_latency_total_s", 0.0)
                                       for t in trajectories) / len(trajectories),
        **{f"charts/end_{reason}": count for reason, count in end_reasons.items()},
    }
