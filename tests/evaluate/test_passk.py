"""The pass@k estimator and the paired bootstrap, checked against exact combinatorics."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import pytest

from agent_rl.evaluate.passk import (
    SUCCESS_THRESHOLD,
    is_success,
    macro_mean,
    micro_mean,
    paired_macro_difference_ci,
    pass_at_k,
)


@pytest.mark.parametrize(
    ("num_samples", "num_correct", "k", "expected"),
    [
        (1, 0, 1, 0.0),
        (1, 1, 1, 1.0),
        (4, 1, 1, 0.25),
        (4, 2, 1, 0.5),
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (4, 2, 2, 5 / 6),  # 1 - C(2,2)/C(4,2) = 1 - 1/6
        (5, 1, 3, 0.6),  # 1 - C(4,3)/C(5,3) = 1 - 4/10
        (10, 3, 5, 11 / 12),  # 1 - C(7,5)/C(10,5) = 1 - 21/252
        (4, 0, 4, 0.0),
        (4, 1, 4, 1.0),
    ],
)
def test_pass_at_k_matches_hand_computed_values(num_samples, num_correct, k, expected):
    assert pass_at_k(num_samples, num_correct, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_brute_force_enumeration_of_subsets():
    for num_samples in range(1, 8):
        for num_correct in range(num_samples + 1):
            outcomes = [True] * num_correct + [False] * (num_samples - num_correct)
            for k in range(1, num_samples + 1):
                subsets = list(itertools.combinations(outcomes, k))
                brute = Fraction(sum(any(subset) for subset in subsets), len(subsets))
                assert pass_at_k(num_samples, num_correct, k) == pytest.approx(
                    float(brute), abs=1e-12
                ), (num_samples, num_correct, k)


def test_pass_at_k_matches_exact_binomials_where_floats_would_overflow():
    num_samples, num_correct, k = 5000, 7, 300
    exact = 1 - Fraction(math.comb(num_samples - num_correct, k), math.comb(num_samples, k))
    assert math.comb(num_samples, k) > 10**308, "C(n, k) alone would overflow a float"
    assert pass_at_k(num_samples, num_correct, k) == pytest.approx(float(exact), rel=1e-12)


def test_pass_at_1_is_the_fraction_of_successes():
    for num_correct in range(9):
        assert pass_at_k(8, num_correct, 1) == pytest.approx(num_correct / 8)


@pytest.mark.parametrize(("num_samples", "num_correct", "k"), [(0, 0, 1), (4, 5, 1), (4, -1, 1),
                                                                (4, 1, 0), (4, 1, 5)])
def test_pass_at_k_rejects_impossible_counts(num_samples, num_correct, k):
    with pytest.raises(ValueError):
        pass_at_k(num_samples, num_correct, k)


def test_success_means_reward_at_least_one():
    assert SUCCESS_THRESHOLD == 1.0
    assert is_success(1.0) and is_success(1.5)
    assert not is_success(0.999) and not is_success(0.0)


def test_macro_weighs_categories_equally_and_micro_weighs_items():
    scores = {"big": [1.0] * 9 + [0.0], "small": [0.0]}
    assert macro_mean(scores) == pytest.approx((0.9 + 0.0) / 2)
    assert micro_mean(scores) == pytest.approx(9 / 11)


def _scores(rng: random.Random, categories: dict[str, int], rate: float) -> dict:
    return {
        category: {f"{category}-{i}": float(rng.random() < rate) for i in range(size)}
        for category, size in categories.items()
    }


def test_bootstrap_ci_contains_the_estimate_and_is_seeded():
    rng = random.Random(1)
    sizes = {"math": 40, "code": 25, "data": 10}
    scores_a, scores_b = _scores(rng, sizes, 0.7), _scores(rng, sizes, 0.3)
    first = paired_macro_difference_ci(scores_a, scores_b, num_resamples=500, seed=3)
    again = paired_macro_difference_ci(scores_a, scores_b, num_resamples=500, seed=3)
    other_seed = paired_macro_difference_ci(scores_a, scores_b, num_resamples=500, seed=4)
    assert first == again
    assert (first.low, first.high) != (other_seed.low, other_seed.high)
    assert first.low <= first.estimate <= first.high
    expected = macro_mean({c: list(v.values()) for c, v in scores_a.items()}) - macro_mean(
        {c: list(v.values()) for c, v in scores_b.items()}
    )
    assert first.estimate == pytest.approx(expected)
    assert first.low > 0.0, "a 0.7 vs 0.3 success rate over 75 tasks is a clear difference"


def test_bootstrap_ci_of_identical_evaluations_is_zero_width():
    scores = _scores(random.Random(0), {"math": 20, "code": 5}, 0.5)
    interval = paired_macro_difference_ci(scores, scores, num_resamples=200)
    assert (interval.low, interval.estimate, interval.high) == (0.0, 0.0, 0.0)


def test_bootstrap_ci_narrows_with_more_tasks_and_covers_zero_for_equal_models():
    rng = random.Random(2)
    small = {"math": 10, "code": 10}
    large = {"math": 400, "code": 400}
    narrow = paired_macro_difference_ci(_scores(rng, large, 0.5), _scores(rng, large, 0.5),
                                        num_resamples=400)
    wide = paired_macro_difference_ci(_scores(rng, small, 0.5), _scores(rng, small, 0.5),
                                      num_resamples=400)
    assert narrow.high - narrow.low < wide.high - wide.low
    assert narrow.low < 0.0 < narrow.high
    # Per task the difference of two fair coins has variance 0.5; the macro mean of two categories
    # of 400 has variance 0.5 / 800, so the 95% half-width is about 1.96 * 0.025 = 0.05.
    assert 0.02 < (narrow.high - narrow.low) / 2 < 0.08


def test_bootstrap_refuses_reports_of_different_tasks():
    scores_a = {"math": {"t1": 1.0, "t2": 0.0}}
    scores_b = {"math": {"t1": 1.0, "t3": 0.0}}
    with pytest.raises(ValueError, match="different tasks"):
        paired_macro_difference_ci(scores_a, scores_b)
    with pytest.raises(ValueError, match="different categories"):
        paired_macro_difference_ci(scores_a, {"code": {"t1": 1.0}})
