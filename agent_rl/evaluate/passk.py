"""Pass@k estimators and the bootstrap used to compare two evaluations.

pass@k is estimated per task from n samples with c successes by the unbiased estimator of
Chen et al. 2021 ("Evaluating Large Language Models Trained on Code"):
pass@k = 1 - C(n - c, k) / C(n, k). The binomial ratio overflows floats for large n, so it is
computed as the product prod_{i = n - c + 1}^{n} (1 - k / i), which stays in [0, 1] throughout.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

SUCCESS_THRESHOLD = 1.0
"""An episode succeeds when its reward is >= this. Verifiers give 1.0 for a correct final answer
and less for partial credit or none, so only a fully correct answer counts as a pass."""


def is_success(reward: float, threshold: float = SUCCESS_THRESHOLD) -> bool:
    """Whether an episode's reward counts as solving the task."""
    return reward >= threshold


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    """Unbiased estimate of the chance that at least one of k samples (of n drawn) is correct.

    Raises:
        ValueError: k is not in 1..n, or the counts are impossible (c < 0 or c > n).
    """
    if num_samples < 1:
        raise ValueError(
            f"pass@k needs at least one sample per task, got num_samples={num_samples}"
        )
    if not 0 <= num_correct <= num_samples:
        raise ValueError(
            f"num_correct must be between 0 and num_samples={num_samples}, got {num_correct}"
        )
    if not 1 <= k <= num_samples:
        raise ValueError(
            f"pass@{k} needs 1 <= k <= num_samples; got k={k} with {num_samples} samples: "
            "sample each task at least k times"
        )
    num_wrong = num_samples - num_correct
    if num_wrong < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i): every factor lies in [0, 1).
    all_wrong = 1.0
    for i in range(num_wrong + 1, num_samples + 1):
        all_wrong *= 1.0 - k / i
    return 1.0 - all_wrong


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; 0.0 for no values so that an empty category reads as nothing solved."""
    return sum(values) / len(values) if values else 0.0


def macro_mean(per_category: Mapping[str, Sequence[float]]) -> float:
    """Mean over categories of the mean within each: every category weighs the same."""
    return mean([mean(values) for values in per_category.values() if values])


def micro_mean(per_category: Mapping[str, Sequence[float]]) -> float:
    """Mean over all items regardless of category: large categories weigh more."""
    return mean([value for values in per_category.values() for value in values])


@dataclass(frozen=True)
class BootstrapInterval:
    """A statistic and its percentile bootstrap confidence interval."""

    estimate: float
    low: float
    high: float
    confidence: float
    num_resamples: int
    seed: int


def paired_macro_difference_ci(
    scores_a: Mapping[str, Mapping[str, float]],
    scores_b: Mapping[str, Mapping[str, float]],
    num_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> BootstrapInterval:
    """Bootstrap CI of macro(A) - macro(B) over tasks, paired and stratified by category.

    `scores_x[category][task_id]` is a task's pass@1 in evaluation x. Both evaluations must cover
    the same tasks: each resample draws, within every category, as many tasks as it has (with
    replacement) and scores A and B on the same draw, so task difficulty cancels out and every
    category keeps its weight in the macro mean.

    Raises:
        ValueError: the two evaluations do not cover the same tasks, or a parameter is out of range.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if num_resamples < 1:
        raise ValueError(f"num_resamples must be at least 1, got {num_resamples}")
    paired = _pair_tasks(scores_a, scores_b)
    if not paired:
        raise ValueError("the two evaluations share no tasks; compare reports of the same task set")
    differences = {category: [a - b for a, b in pairs] for category, pairs in paired.items()}
    estimate = macro_mean(differences)
    rng = random.Random(seed)
    samples = sorted(
        macro_mean({category: rng.choices(values, k=len(values))
                    for category, values in differences.items()})
        for _ in range(num_resamples)
    )
    tail = (1.0 - confidence) / 2.0
    return BootstrapInterval(
        estimate=estimate,
        low=_quantile(samples, tail),
        high=_quantile(samples, 1.0 - tail),
        confidence=confidence,
        num_resamples=num_resamples,
        seed=seed,
    )


def _pair_tasks(
    scores_a: Mapping[str, Mapping[str, float]], scores_b: Mapping[str, Mapping[str, float]]
) -> dict[str, list[tuple[float, float]]]:
    if set(scores_a) != set(scores_b):
        raise ValueError(
            f"the evaluations cover different categories: {sorted(scores_a)} vs {sorted(scores_b)}"
        )
    paired: dict[str, list[tuple[float, float]]] = {}
    for category in sorted(scores_a):
        tasks_a, tasks_b = scores_a[category], scores_b[category]
        if set(tasks_a) != set(tasks_b):
            only_a = sorted(set(tasks_a) - set(tasks_b))[:3]
            only_b = sorted(set(tasks_b) - set(tasks_a))[:3]
            raise ValueError(
                f"category {category!r} has different tasks in the two evaluations "
                f"(only in A: {only_a}, only in B: {only_b}); evaluate both on the same tasks"
            )
        paired[category] = [(tasks_a[task], tasks_b[task]) for task in sorted(tasks_a)]
    return paired


def _quantile(sorted_values: Sequence[float], fraction: float) -> float:
    """Linear-interpolation quantile (numpy's default) of already sorted values."""
    position = fraction * (len(sorted_values) - 1)
    lower = int(position)
    upper = min(lower + 1, len(sorted_values) - 1)
    weight = position - lower
    return sorted_values[lower] * (1.0 - weight) + sorted_values[upper] * weight
