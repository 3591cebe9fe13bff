"""A run killed between two updates and resumed trains on exactly the groups, in the same order,
as an unbroken run with the same seed, and ends with the same weights bit for bit.

Sync mode, so which groups an update takes does not depend on timing. Each group's sampling seed
is its task position, and the matched kernels give batch-invariant logits, so the resumed run
samples the very tokens the unbroken run sampled; with the optimizer and RNG states restored
from the checkpoint, the learner then takes the very same steps.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny_run import tiny_run_config

from agent_rl.fault_config import FaultConfig
from agent_rl.learn.checkpoint import latest_checkpoint
from agent_rl.orchestrate.faults import LearnerKilled
from agent_rl.orchestrate.ledger import read_ledger
from agent_rl.orchestrate.pipeline import train
from agent_rl.orchestrate.synced_weights import (
    last_sync_version,
    load_synced_weights,
    save_synced_weights,
)
from agent_rl.train_config import TrainConfig

NUM_UPDATES = 4
KILLED_AFTER = 3  # between the checkpoint at 2 and the end: update 3 is trained twice in all


def _config(out_dir: Path, faults: FaultConfig | None = None, **pipeline: int) -> TrainConfig:
    return tiny_run_config(out_dir, faults, **{"num_updates": NUM_UPDATES, **pipeline})


@pytest.fixture(scope="module")
def unbroken_run(local_ray, tmp_path_factory):
    return train(_config(tmp_path_factory.mktemp("unbroken")))


@pytest.fixture(scope="module")
def killed_and_resumed(local_ray, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("killed")
    with pytest.raises(LearnerKilled):
        train(_config(out_dir, faults=FaultConfig(kill_learner_at_update=KILLED_AFTER)))
    at_kill = read_ledger(out_dir)
    checkpoint = latest_checkpoint(out_dir)
    resumed = train(_config(out_dir))
    return at_kill, checkpoint, resumed


@pytest.mark.slow
def test_killed_run_leaves_a_ledger_and_its_last_checkpoint(killed_and_resumed) -> None:
    at_kill, checkpoint, _ = killed_and_resumed
    assert at_kill["status"].startswith("interrupted: LearnerKilled")
    assert at_kill["version"] == KILLED_AFTER
    assert len(at_kill["trained"]) == KILLED_AFTER * 2
    assert checkpoint.name == "update_000002"


@pytest.mark.slow
def test_resumed_run_trains_the_same_groups_in_the_same_order_as_an_unbroken_run(
    unbroken_run, killed_and_resumed
) -> None:
    _, _, resumed = killed_and_resumed
    assert resumed.resumed_from == 2 and resumed.updates == NUM_UPDATES
    unbroken = read_ledger(unbroken_run.run_dir)
    after_resume = read_ledger(resumed.run_dir)
    assert after_resume["status"] == unbroken["status"] == "finished"
    assert len(unbroken["trained"]) == NUM_UPDATES * 2
    assert after_resume["trained"] == unbroken["trained"]
    for ledger in (unbroken, after_resume):
        counts = ledger["counts"]
        assert counts["generated"] == counts["trained"] + counts["dropped"]


@pytest.mark.slow
def test_resumed_run_ends_with_the_same_weights_as_an_unbroken_run(
    unbroken_run, killed_and_resumed
) -> None:
    _, _, resumed = killed_and_resumed
    final = [torch.load(latest_checkpoint(run.run_dir) / "learner.pt", weights_only=True)
             for run in (unbroken_run, resumed)]
    assert final[0]["version"] == final[1]["version"] == NUM_UPDATES
    first, second = (state["model"] for state in final)
    assert first.keys() == second.keys()
    assert [name for name in first if not torch.equal(first[name], second[name])] == []
    earlier = torch.load(unbroken_run.run_dir / "checkpoints" / "update_000002" / "learner.pt",
                         weights_only=True)["model"]
    assert any(not torch.equal(earlier[name], first[name]) for name in first), "no step was taken"


@pytest.mark.slow
def test_resuming_under_other_settings_is_refused_by_name(killed_and_resumed) -> None:
    """A changed learning rate would go on from the old run's checkpoint and mix two runs in
    one ledger; other knobs (updates, faults) may change between attempts."""
    from agent_rl.config import ConfigError, with_overrides

    _, _, resumed = killed_and_resumed
    config = with_overrides(_config(resumed.run_dir), {"learner.lr": 2e-4, "seed": 8})
    with pytest.raises(ConfigError, match=r"other settings \(seed: 7 -> 8; "
                       r"learner.lr: 0.0001 -> 0.0002\); resuming would mix"):
        train(config)


def test_run_defining_settings_compare_yaml_lists_with_tuples() -> None:
    from agent_rl.orchestrate.run_state import changed_run_settings

    saved = {"learner": {"lr": 1e-5, "betas": [0.9, 0.999]}, "pipeline": {"num_updates": 10}}
    same = {"learner": {"lr": 1e-5, "betas": (0.9, 0.999)}, "pipeline": {"num_updates": 40}}
    assert changed_run_settings(saved, same) == []
    assert changed_run_settings(saved, {**same, "learner": {"lr": 2e-5, "betas": (0.9, 0.99)}}) \
        == ["learner.lr: 1e-05 -> 2e-05", "learner.betas: [0.9, 0.999] -> [0.9, 0.99]"]


def test_last_sync_version_is_the_last_multiple_of_the_sync_interval() -> None:
    assert [last_sync_version(v, 3) for v in range(8)] == [0, 0, 0, 3, 3, 3, 6, 6]
    assert last_sync_version(5, 1) == 5


def test_synced_weights_come_back_only_for_their_version(tmp_path) -> None:
    weights = {"w": torch.arange(4.0)}
    assert load_synced_weights(tmp_path, 3) is None
    save_synced_weights(tmp_path, 3, weights)
    assert torch.equal(load_synced_weights(tmp_path, 3)["w"], weights["w"])
    assert load_synced_weights(tmp_path, 6) is None


@pytest.mark.slow
def test_resumed_run_with_a_sparse_weight_sync_samples_from_the_last_synced_weights(
    local_ray, tmp_path
) -> None:
    """Killed after update 5 of a run that syncs every 3: it resumes from the checkpoint at 4,
    and its actors take the weights synced at 3, not 4's, so the lag goes on where it was."""
    sparse_sync = {"max_lag": 4, "weight_sync_every": 3, "num_updates": 6}
    with pytest.raises(LearnerKilled):
        train(_config(tmp_path, FaultConfig(kill_learner_at_update=5), **sparse_sync))
    assert latest_checkpoint(tmp_path).name == "update_000004"
    resumed = train(_config(tmp_path, **sparse_sync))
    assert resumed.resumed_from == 4
    records = {r["step"]: r for r in map(json.loads, (tmp_path / "metrics.jsonl").open())}
    assert records[5]["pipeline/rollout_weights_version"] == 3
    assert min(int(lag) for lag in records[5]["lag/hist"]) >= 1
    assert records[6]["pipeline/rollout_weights_version"] == 6
