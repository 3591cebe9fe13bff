"""`agent-rl train` with a data-parallel learner: a run at world size 2 killed after its
checkpoint resumes at world size 1 and finishes, its ledger whole. Sync mode with matched
kernels, so every update is at lag 0 and both ranks recompute the rollout's logprobs bit for
bit: every importance weight is exactly 1, before the kill and after. A learner rank killed
mid-run is restarted and the run finishes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tiny_run import tiny_run_config

from agent_rl.fault_config import FaultConfig
from agent_rl.learn.checkpoint import latest_checkpoint
from agent_rl.learn.data_parallel import RANK_NAME
from agent_rl.metrics import read_metrics
from agent_rl.orchestrate.faults import LearnerKilled
from agent_rl.orchestrate.ledger import read_ledger
from agent_rl.orchestrate.pipeline import train
from agent_rl.train_config import TrainConfig

NUM_UPDATES = 4
KILLED_AFTER = 3  # the checkpoint at 2 is where the resumed run starts


def _config(out_dir: Path, world_size: int, faults: FaultConfig | None = None) -> TrainConfig:
    return tiny_run_config(out_dir, faults, learner={"world_size": world_size, "threads": 1},
                           num_updates=NUM_UPDATES)


@pytest.mark.slow
def test_a_run_at_world_size_2_killed_resumes_at_world_size_1(local_ray, tmp_path: Path
                                                             ) -> None:
    with pytest.raises(LearnerKilled):
        train(_config(tmp_path, 2, FaultConfig(kill_learner_at_update=KILLED_AFTER)))
    assert read_ledger(tmp_path)["version"] == KILLED_AFTER
    assert latest_checkpoint(tmp_path).name == "update_000002"

    resumed = train(_config(tmp_path, 1))
    assert resumed.resumed_from == 2 and resumed.updates == NUM_UPDATES
    ledger = read_ledger(tmp_path)
    assert ledger["status"] == "finished"
    assert ledger["counts"]["generated"] == ledger["counts"]["trained"] + ledger["counts"]["dropped"]
    records = read_metrics(tmp_path)
    assert [record["step"] for record in records] == list(range(1, NUM_UPDATES + 1))
    for record in records:
        assert record["is/max"] == record["is/min"] == 1.0


@pytest.mark.slow
def test_a_learner_rank_killed_mid_run_is_restarted_and_the_run_finishes_with_its_ledger_whole(
        local_ray, tmp_path: Path) -> None:
    """Rank 1's actor is killed after update 2; the next update restarts it from rank 0's state
    and trains its batch, so the run ends at its last update with no group lost, and every
    update after the kill is still on-policy to the bit."""

    def kill_rank_1(metrics: dict[str, Any]) -> None:
        if metrics["step"] == KILLED_AFTER - 1:
            names = [name for name in local_ray.util.list_named_actors()
                     if name.startswith(f"{RANK_NAME}-1-")]
            assert len(names) == 1, names
            local_ray.kill(local_ray.get_actor(names[0]), no_restart=True)

    summary = train(_config(tmp_path, 2), on_update=kill_rank_1)
    assert summary.updates == NUM_UPDATES
    assert summary.faults["learner_rank_restarts"] == 1
    ledger = read_ledger(tmp_path)
    assert ledger["status"] == "finished"
    counts = ledger["counts"]
    assert counts["generated"] == counts["trained"] + counts["dropped"]
    assert sum(counts["dropped_by_reason"].values()) == counts["dropped"]
    records = read_metrics(tmp_path)
    assert [record["step"] for record in records] == list(range(1, NUM_UPDATES + 1))
    for record in records:
        assert record["is/max"] == record["is/min"] == 1.0
