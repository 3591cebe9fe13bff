"""The whole pipeline on the tiny model: Ray, a real vLLM rollout actor, the sandboxed Python env.

One asynchronous run (lag above 1) and one resume of it in sync mode share a local Ray instance.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from agent_rl.config import ConfigError, with_overrides
from agent_rl.diagnostics.plot import plot_run
from agent_rl.env_config import EnvConfig
from agent_rl.learn.config import LossConfig
from agent_rl.metrics import read_metrics
from agent_rl.orchestrate.ledger import FLAT_FILTERED
from agent_rl.orchestrate.pipeline import RunSummary, train
from agent_rl.orchestrate.tasks import TaskStream
from agent_rl.train_config import (
    PipelineConfig,
    TrainConfig,
    load_train_config,
    migrate_flat_config,
)

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_task_stream_is_reproducible_and_covers_every_task_each_pass() -> None:
    tasks = [{"task_id": str(i)} for i in range(5)]
    stream = TaskStream(tasks, seed=3)
    first_pass = [stream[i]["task_id"] for i in range(5)]
    assert sorted(first_pass) == ["0", "1", "2", "3", "4"]
    assert [TaskStream(tasks, seed=3)[i]["task_id"] for i in range(10)] == [
        stream[i]["task_id"] for i in range(10)
    ]


@pytest.mark.parametrize(
    "name",
    ["smoke.yaml", "python_tool_lag64.yaml", "demo.yaml", "learning_curve.yaml", "bench_pipeline.yaml",
     "lag64.yaml"],
)
def test_shipped_configs_load(name: str) -> None:
    config = load_train_config(CONFIGS / name)
    assert config.loss == LossConfig(), "the method: unclipped token-level IS, no KL"


def test_unknown_config_key_names_the_nearest_valid_one(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("pipeline:\n  max_lagg: 3\n")
    with pytest.raises(ConfigError, match="pipeline.max_lagg.*did you mean 'max_lag'"):
        load_train_config(path)


def test_a_flat_key_names_its_new_place(tmp_path: Path) -> None:
    path = tmp_path / "old.yaml"
    path.write_text("env: agent_rl/PythonTool-v0\nlr: 1.0e-5\nmax_new_tokens: 64\n")
    with pytest.raises(ConfigError, match=r"env -> env.id, lr -> learner.lr, max_new_tokens -> "
                       r"rollout.max_tokens_per_turn.*agent-rl config migrate"):
        load_train_config(path)
    migrated = TrainConfig.model_validate(migrate_flat_config(
        {"env": "agent_rl/Parity-v0", "lr": 1e-5, "task_categories": ["dates"], "max_turns": 2}))
    assert migrated.env.id == "agent_rl/Parity-v0" and migrated.learner.lr == 1e-5
    assert migrated.env.kwargs == {"categories": ["dates"], "max_turns": 2}


@pytest.mark.parametrize("key, value, place", [
    ("engine.dtype", "float32", "dtype"), ("rollout.env_id", "x", "env.id"),
    ("rollout.seed", 1, "seed"), ("engine.model", "x", "model"),
])
def test_a_component_field_the_run_fills_is_refused(tmp_path: Path, key: str, value: object,
                                                    place: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("model: tiny\n")
    with pytest.raises(ConfigError, match=rf"{key} is set by the run; set {place}"):
        load_train_config(path, overrides={key: value})


def test_sampling_the_learner_cannot_score_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="importance weights"):
        with_overrides(TrainConfig(), {"rollout.top_p": 0.9})


def test_misspelled_env_kwargs_fail_before_anything_starts(tmp_path: Path) -> None:
    config = TrainConfig(env=EnvConfig(kwargs={"plain_txt_answers": True}), out_dir=tmp_path)
    with pytest.raises(ValueError, match="plain_txt_answers"):
        train(config)


def test_sync_is_max_lag_zero_and_an_old_mode_key_says_so() -> None:
    assert PipelineConfig(max_lag=0).mode == "sync" and PipelineConfig().mode == "async"
    with pytest.raises(ValueError, match=r"pipeline.mode \('sync'\) is gone.*max_lag: 0"):
        PipelineConfig.model_validate({"mode": "sync", "max_lag": 64})


def test_a_weight_sync_gap_beyond_max_lag_is_refused_naming_both() -> None:
    assert PipelineConfig(max_lag=64, weight_sync_every=65).weight_sync_every == 65
    with pytest.raises(ValueError, match=r"weight_sync_every = 66 .*max_lag = 64"):
        PipelineConfig(max_lag=64, weight_sync_every=66)
    with pytest.raises(ValueError, match=r"weight_sync_every = 2 .*max_lag = 0"):
        PipelineConfig(max_lag=0, weight_sync_every=2)
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        PipelineConfig(weight_sync_every=0)


def test_evaluations_fall_on_weight_syncs() -> None:
    assert PipelineConfig(weight_sync_every=8, eval_every=16).eval_every == 16
    with pytest.raises(ValueError, match=r"eval_every = 10 .*weight_sync_every = 8"):
        PipelineConfig(weight_sync_every=8, eval_every=10)


def _config(out_dir: Path, overrides: dict[str, object]) -> TrainConfig:
    """The tests' run on the tiny model; `overrides` are dotted keys, as `--set` takes them."""
    base = TrainConfig.model_validate({
        "model": "tiny",
        "out_dir": out_dir,
        "env": {"kwargs": {"categories": ["arithmetic"], "max_turns": 2}},
        "rollout": {"group_size": 2, "max_tokens_per_turn": 16},
        "engine": {"max_model_len": 512, "kv_cache_gib": 0.25},
        "learner": {"lr": 1e-4},
        "pipeline": {"groups_per_update": 1, "groups_in_flight_per_actor": 4,
                     "stall_timeout_s": 300.0},
    })
    return with_overrides(base, overrides)


@pytest.fixture(scope="module")
def async_run(local_ray, tmp_path_factory) -> tuple[RunSummary, list[dict]]:
    out_dir = tmp_path_factory.mktemp("async_run")
    seen: list[dict] = []
    config = _config(out_dir, {"pipeline.max_lag": 3,
                               "pipeline.num_updates": 5, "pipeline.checkpoint_every": 2,
                               "pipeline.eval_every": 5, "env.eval_tasks": 2})
    return train(config, on_update=seen.append), seen


@pytest.mark.slow
def test_async_run_trains_at_lag_above_one_within_max_lag(async_run) -> None:
    summary, seen = async_run
    assert summary.updates == 5
    assert [m["step"] for m in seen] == [1, 2, 3, 4, 5]
    assert 1 < summary.lag_max <= 3
    records = read_metrics(summary.run_dir)
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    for record in records:
        assert record["lag/max"] <= 3
        assert sum(record["lag/hist"].values()) > 0
        assert record["lag/share_ge_16"] == 0.0  # max_lag 3: nothing that far behind
        assert record["is/tokens"] > 0
        # Where the rollout's time went since its first group: the shares make the whole.
        shares = [record[f"rollout/{part}_share"] for part in ("decoding", "env_wait", "idle")]
        assert shares[0] > 0 and sum(shares) == pytest.approx(1.0)
    plots = plot_run(summary.run_dir)
    assert {p.name for p in plots} >= {"importance_weights.png", "lag.png"}
    assert (summary.run_dir / "config.yaml").exists()
    # The held-out evaluation at update 5 ran on that version's weights, every episode graded.
    assert "eval/reward_mean" not in records[3] and records[4]["eval/env_errors"] == 0
    assert 0.0 <= records[4]["eval/reward_mean"] <= 1.0


@pytest.mark.slow
def test_async_run_ledger_accounts_for_every_group(async_run) -> None:
    summary, _ = async_run
    ledger = summary.ledger
    assert ledger["trained"] == 5
    assert ledger["generated"] == ledger["trained"] + ledger["dropped"]
    assert set(ledger["dropped_by_reason"]) <= {"stale", "run_ended"}
    state = json.loads(next((summary.run_dir / "checkpoints").glob("update_000005/run_state.json"))
                       .read_text())
    assert len(set(state["ledger"]["trained"])) == 5


@pytest.mark.slow
def test_resume_in_sync_mode_has_lag_zero_and_unit_weights_with_matched_kernels(
    async_run, local_ray
) -> None:
    summary, _ = async_run
    checkpoint = summary.run_dir / "checkpoints" / "update_000005"
    state_before = json.loads((checkpoint / "run_state.json").read_text())
    # Move the weights away from the tiny model's files, so the rollout can only match the learner
    # if the resumed weights really reached the engine.
    learner_state = torch.load(checkpoint / "learner.pt", weights_only=True)
    generator = torch.Generator().manual_seed(0)
    for tensor in learner_state["model"].values():
        tensor.add_(0.01 * torch.randn(tensor.shape, generator=generator))
    torch.save(learner_state, checkpoint / "learner.pt")

    resumed = train(_config(summary.run_dir, {"pipeline.max_lag": 0,
                                              "pipeline.num_updates": 6}))
    assert resumed.resumed_from == 5
    assert resumed.updates == 6
    record = read_metrics(summary.run_dir)[-1]
    assert record["step"] == 6
    assert record["lag/hist"] == {"0": sum(record["lag/hist"].values())}
    # Matched kernels: at lag 0 the learner recomputes the rollout's logprobs bit for bit.
    assert record["is/max"] == 1.0 and record["is/min"] == 1.0
    assert record["is/kl_k3"] == 0.0
    ledger = resumed.ledger
    assert ledger["trained"] == 6
    assert ledger["rerun"] <= len(state_before["in_flight_task_indices"])
    assert ledger["generated"] == ledger["trained"] + ledger["dropped"]


@pytest.mark.slow
def test_dynamic_sampling_steps_only_on_groups_with_reward_variance(
    local_ray, tmp_path: Path
) -> None:
    # Parity-v0 pays a random model half the time, so with two responses per group about half
    # the groups are flat: those must be consumed and charted, never stepped on alone. Sync mode
    # samples every group at a known version, so which groups are flat does not hang on timing.
    # Prefix caching and the shared-prompt learner pass are on too: at lag 0 the learner must
    # still recompute every sampled token's logprob bit for bit.
    config = _config(tmp_path, {"env.id": "agent_rl/Parity-v0", "pipeline.max_lag": 0,
                                "pipeline.num_updates": 3, "pipeline.dynamic_sampling": True,
                                "engine.enable_prefix_caching": True, "seed": 3})
    summary = train(config)
    records = read_metrics(summary.run_dir)
    assert [r["policy_version"] for r in records] == [1, 2, 3]
    ledger = summary.ledger
    assert ledger["generated"] == ledger["trained"] + ledger["dropped"]
    assert ledger["trained"] == 3 and ledger["zero_variance"] == 0, "one varied group per update"
    flat = ledger["dropped_by_reason"].get(FLAT_FILTERED, 0)
    assert flat > 0, "seed 3 gives flat groups; pick another if Parity changed"
    filtered = sum(r.get("charts/filtered_groups", 0) for r in records)
    assert filtered <= flat
    for record in records:
        assert record["is/max"] == record["is/min"] == 1.0
        assert record["charts/trained_responses"] == 2
        assert record["charts/responses"] == 2 * (1 + record.get("charts/filtered_groups", 0))
