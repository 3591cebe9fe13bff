"""What the pipeline's parts cost, measured: the simulator's inputs.

A rollout device decodes at `rollout_tokens_per_s` summed over the episodes it runs at once
(batched decoding); a learner device trains at `learner_tokens_per_s` over every token of a
batch (prompt, responses, tool results); each env step waits `env_step_s` (lognormal with
`env_step_sigma`, 0 for a fixed latency; turn lengths likewise) while the device serves other
episodes; a weight update stops each rollout device for `weight_load_s`. `costs_from_run`
reads all of these from a real run's `metrics.jsonl`, so a prediction can be checked against a
measured run.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import Field

from agent_rl.config import ConfigError, StrictModel
from agent_rl.metrics import METRICS_FILE, read_metrics, read_summary


class Costs(StrictModel):
    """Measured costs of one rollout device, one learner device and the env."""

    rollout_tokens_per_s: float = Field(gt=0, description="decode tokens/s of one rollout "
                                        "device, summed over the episodes it runs at once")
    rollout_saturation: int = Field(1, ge=1, description="episodes in decode at which a "
                                    "rollout device reaches rollout_tokens_per_s; fewer get "
                                    "a proportional share of it")
    learner_tokens_per_s: float = Field(gt=0, description="trained tokens/s of one learner "
                                        "device (forward and backward)")
    sampled_tokens_per_turn: float = Field(gt=0, description="mean model tokens of one turn")
    sampled_tokens_sigma: float = Field(0.0, ge=0, description="lognormal sigma of turn "
                                        "lengths (long responses are the stragglers); 0: fixed")
    turns_per_episode: float = Field(1.0, ge=1, description="assistant turns per episode")
    episode_tokens: float = Field(gt=0, description="all tokens of an episode the learner "
                                  "trains on (prompt, turns, tool results)")
    env_step_s: float = Field(0.0, ge=0, description="mean env latency after each turn")
    env_step_sigma: float = Field(0.0, ge=0, description="lognormal sigma of env latency; "
                                  "0: fixed")
    weight_load_s: float = Field(0.0, ge=0, description="a rollout device's pause to load "
                                 "new weights")
    update_overhead_s: float = Field(0.0, ge=0, description="driver time per update besides "
                                     "the learner step (weight publish, metrics, checkpoints)")
    flat_group_share: float = Field(0.0, ge=0, lt=1, description="share of groups with no "
                                    "reward variance (dropped under dynamic sampling)")
    shared_cores: bool = Field(False, description="rollout and learner share one machine's "
                               "cores: while the learner trains, rollout runs at "
                               "rollout_share_while_training of its speed")
    rollout_share_while_training: float = Field(1.0, gt=0, le=1)


def costs_from_run(run_dir: str | Path, shared_cores: bool = True) -> Costs:
    """The costs a finished run measured: learner speed, tokens per turn and episode, weight
    loads and the flat-group share from `metrics.jsonl`; rollout speed from the time the run's
    learner left to the rollout.

    Rollout speed is exact for a synchronous run (rollout and learner take turns, so rollout
    time is the wall time minus the update time); that is the run to calibrate on, and the
    asynchronous run the one to predict.
    """
    run_dir = Path(run_dir)
    summary = read_summary(run_dir)
    resumed_from = summary.get("resumed_from") or 0  # earlier processes' updates: not timed here
    records = [r for r in read_metrics(run_dir) if r["step"] > resumed_from]
    if not records:
        raise ConfigError(f"{run_dir} recorded no update in {METRICS_FILE} to measure")
    updates = len(records)
    learner_s = sum(r["perf/update_s"] for r in records)
    groups = sum(r.get("charts/groups", 0) for r in records)
    responses = sum(r.get("charts/responses", 0) for r in records)
    model_tokens = sum(r["charts/model_tokens_mean"] * r["charts/responses"] for r in records)
    turns = _mean(records, "charts/turns_mean")
    rollout_s = summary["train_wall_s"] - learner_s
    if rollout_s <= 0 or responses == 0:
        raise ConfigError(f"{run_dir}: the run left no rollout time to measure ({updates} "
                          f"updates, {summary['train_wall_s']:.1f} s wall, {learner_s:.1f} s "
                          "learner)")
    if _mean(records, "perf/env_latency_s_mean", default=0.0) > 0:
        raise ConfigError(f"{run_dir} ran with an env latency profile, so its wall time mixes "
                          "decoding with waiting; calibrate on a run without one and give the "
                          "latency with --cost env_step_s=... --cost env_step_sigma=...")
    flat = sum(r.get("charts/filtered_groups", 0) for r in records)
    return Costs(
        rollout_tokens_per_s=model_tokens / rollout_s,
        rollout_saturation=1,
        learner_tokens_per_s=_mean(records, "perf/learner_tokens_per_s"),
        sampled_tokens_per_turn=model_tokens / responses / turns,
        turns_per_episode=turns,
        episode_tokens=_mean(records, "charts/episode_tokens_mean"),
        env_step_s=0.0,
        weight_load_s=_mean(records, "perf/actor_weight_load_s"),
        update_overhead_s=max(0.0, learner_s / updates - _mean(records, "perf/learner_step_s")),
        flat_group_share=flat / groups if groups else 0.0,
        shared_cores=shared_cores,
        # A sync run never overlaps the two, so it cannot measure this: with both on the same
        # cores, each gets about half of them while both run.
        rollout_share_while_training=0.5 if shared_cores else 1.0,
    )


def _mean(records: list[dict[str, Any]], key: str, default: float | None = None) -> float:
    values = [r[key] for r in records if isinstance(r.get(key), int | float)
              and math.isfinite(r[key])]
    if not values:
        if default is not None:
            return default
        raise ConfigError(f"no update recorded {key!r}")
    return sum(values) / len(values)
