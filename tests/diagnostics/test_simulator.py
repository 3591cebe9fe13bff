"""The pipeline simulator: the real scheduler's rules against a clock, checked on cases whose
answer is known in closed form, and on the rules themselves (lag bound, ledger)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agent_rl.config import ConfigError
from agent_rl.orchestrate.scheduler import SchedulerLimits
from agent_rl.simulate.costs import Costs, costs_from_run
from agent_rl.simulate.simulator import simulate

ONE_SECOND_EACH = Costs(rollout_tokens_per_s=100, learner_tokens_per_s=100,
                        sampled_tokens_per_turn=100, episode_tokens=100)


def limits(max_lag: int, updates: int = 20, per_update: int = 1, in_flight: int = 1,
           actors: int = 1, dynamic_sampling: bool = False) -> SchedulerLimits:
    return SchedulerLimits(per_update, max_lag, updates, in_flight, actors, dynamic_sampling)


def test_sync_pays_rollout_then_learner_and_async_overlaps_them():
    """A group takes 1 s to sample and 1 s to train: sync 2 s per update; async overlaps the
    next group with training, so after the first update each takes 1 s."""
    sync = simulate(limits(0), ONE_SECOND_EACH, group_size=1)
    assert sync.updates_per_hour == pytest.approx(1800)
    assert sync.lag_counts == {0: 20}
    lagged = simulate(limits(1), ONE_SECOND_EACH, group_size=1)
    assert lagged.hours * 3600 == pytest.approx(21.0)  # 2 s for the first update, then 1 s each
    assert lagged.lag_counts == {0: 1, 1: 19}


def test_no_trained_group_exceeds_max_lag_and_the_ledger_balances():
    costs = ONE_SECOND_EACH.model_copy(update={
        "sampled_tokens_sigma": 1.0, "turns_per_episode": 3, "env_step_s": 2.0,
        "env_step_sigma": 1.0, "rollout_saturation": 8, "flat_group_share": 0.3})
    for max_lag in (0, 1, 4):
        result = simulate(limits(max_lag, updates=30, per_update=2, in_flight=4, actors=3,
                                 dynamic_sampling=True), costs, group_size=4, seed=max_lag)
        assert result.updates == 30 and result.lag_max <= max_lag
        ledger = result.ledger
        assert ledger["generated"] == ledger["trained"] + ledger["dropped"]
        assert ledger["trained"] == 60
        assert set(ledger["dropped_by_reason"]) <= {"flat_filtered", "stale", "run_ended"}


def test_env_latency_is_where_async_wins():
    """With slow envs and many groups in flight, async keeps the devices decoding while sync
    waits on the batch's slowest episode."""
    costs = ONE_SECOND_EACH.model_copy(update={
        "turns_per_episode": 4, "env_step_s": 5.0, "env_step_sigma": 1.0,
        "rollout_saturation": 16, "sampled_tokens_per_turn": 50})
    fast = costs.model_copy(update={"env_step_s": 0.0})
    setup = limits(8, updates=40, per_update=2, in_flight=8)

    def speedup(c: Costs) -> float:
        async_ = simulate(setup, c, group_size=4)
        sync = simulate(limits(0, updates=40, per_update=2, in_flight=8), c, group_size=4)
        return async_.updates_per_hour / sync.updates_per_hour

    assert speedup(costs) > speedup(fast) > 1.0


def test_shared_cores_slow_rollout_while_the_learner_trains():
    shared = ONE_SECOND_EACH.model_copy(update={"shared_cores": True,
                                                "rollout_share_while_training": 0.5})
    alone = simulate(limits(1), ONE_SECOND_EACH, group_size=1)
    together = simulate(limits(1), shared, group_size=1)
    # the overlapped group gets half a group's tokens during the 1 s update, then 0.5 s more
    assert together.hours * 3600 == pytest.approx(2 + 19 * 1.5)
    assert together.updates_per_hour < alone.updates_per_hour


def test_costs_come_from_a_runs_metrics_and_summary(tmp_path):
    records = [{"step": step, "perf/update_s": 2.0, "perf/learner_step_s": 1.5,
                "perf/learner_tokens_per_s": 800.0, "perf/actor_weight_load_s": 0.1,
                "charts/groups": 2, "charts/responses": 8, "charts/model_tokens_mean": 50.0,
                "charts/turns_mean": 2.0, "charts/episode_tokens_mean": 300.0}
               for step in range(1, 11)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "summary.json").write_text(json.dumps({"mode": "sync", "train_wall_s": 60.0,
                                                       "resumed_from": None}))
    costs = costs_from_run(tmp_path)
    assert costs.rollout_tokens_per_s == pytest.approx(10 * 8 * 50 / (60 - 20))
    assert costs.sampled_tokens_per_turn == pytest.approx(25)
    assert costs.update_overhead_s == pytest.approx(0.5)
    assert (costs.learner_tokens_per_s, costs.episode_tokens) == (800.0, 300.0)
    with pytest.raises(ConfigError, match="no summary.json"):
        costs_from_run(tmp_path / "missing")


def test_simulating_imports_neither_ray_nor_vllm():
    code = ("import sys; from agent_rl.simulate.simulator import simulate; "
            "print(sorted(m for m in ('ray', 'vllm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_predict_returns_the_median_seed_with_the_range(tmp_path):
    """A short run under a heavy-tailed latency is one draw among many: the prediction is the
    median seed's run, and `check_row` says whether a measured figure lies in the seeds' range."""
    from agent_rl.simulate.predict import check_row, predict
    from agent_rl.train_config import TrainConfig

    config = TrainConfig.model_validate({
        "model": "tiny", "rollout": {"group_size": 4},
        "pipeline": {"groups_per_update": 2, "groups_in_flight_per_actor": 4}})
    costs = ONE_SECOND_EACH.model_copy(update={
        "turns_per_episode": 3, "env_step_s": 5.0, "env_step_sigma": 1.0})
    results = predict(config, costs, updates=6, seeds=5)
    for result in results.values():
        low, high = result.spread
        assert low <= result.updates_per_hour <= high and low < high
    row = check_row(results, "sync", results["sync"].spread[1], "measured")
    assert row["within_range"] and row["error"] <= 0
    assert not check_row(results, "sync", 10 * results["sync"].spread[1], "x")["within_range"]
    fixed = predict(config, ONE_SECOND_EACH, updates=6, seeds=3)["async"]
    assert fixed.spread[0] == fixed.spread[1] == fixed.updates_per_hour  # nothing random
