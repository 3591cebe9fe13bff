"""The mismatch report's statistics say zero for identical logprobs and grow with the gap."""

from __future__ import annotations

import math

import torch

from agent_rl.diagnostics.mismatch import mismatch_stats


def test_identical_logprobs_report_no_mismatch() -> None:
    logprobs = torch.tensor([-0.5, -2.0, -7.25])
    stats = mismatch_stats(logprobs, logprobs.clone())
    assert stats["logp_diff_max"] == 0.0 and stats["share_bitwise_equal"] == 1.0
    assert stats["weight_dev_max"] == 0.0 and stats["kl_k3"] == 0.0
    assert stats["weight_max_over_median"] == 1.0


def test_importance_weights_follow_the_logprob_gap() -> None:
    behavior = torch.zeros(5)
    learner = torch.tensor([0.0, 0.0, 0.0, 0.0, math.log(2.0)])
    stats = mismatch_stats(behavior, learner)
    assert math.isclose(stats["weight_dev_max"], 1.0, rel_tol=1e-6)
    assert math.isclose(stats["weight_max_over_median"], 2.0, rel_tol=1e-6)
    assert stats["share_bitwise_equal"] == 0.8 and stats["kl_k3"] > 0
