"""A run on a two-node Ray cluster: the learner on the head, the rollout actor placed on a
second node by a custom resource, joined through `ray_address`. Mid-run the rollout node dies
and a new one with the same resource joins: Ray restarts the actor there, the pipeline loads the
current weights into it, the lost groups run again, and the ledger balances (nothing lost,
nothing trained twice).

Both nodes are raylets on this machine (`ray.cluster_utils.Cluster`), which is as real a
cluster as Ray's own multi-node tests use; the test skips, saying why, only where Ray cannot
start a second raylet.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_rl.orchestrate.ledger import read_ledger
from agent_rl.orchestrate.pipeline import train
from agent_rl.train_config import TrainConfig

NUM_UPDATES = 4
NODE_DIES_AFTER = 1


@pytest.fixture()
def two_nodes():
    """A head node (the driver's) and a rollout node offering the `rollout` resource."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    try:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        rollout_node = cluster.add_node(num_cpus=1, resources={"rollout": 1})
        cluster.wait_for_nodes()
    except Exception as error:  # noqa: BLE001 - any start failure is a reason to skip
        pytest.skip(f"Ray cannot start a second raylet here: {type(error).__name__}: {error}")
    yield cluster, rollout_node
    ray.shutdown()
    cluster.shutdown()


def _config(out_dir: Path, address: str) -> TrainConfig:
    return TrainConfig.model_validate({
        "model": "tiny",
        "seed": 3,
        "out_dir": out_dir,
        "env": {"id": "agent_rl/Parity-v0"},
        "rollout": {"group_size": 2, "max_tokens_per_turn": 16},
        "engine": {"max_model_len": 512, "kv_cache_gib": 0.25},
        "learner": {"lr": 1e-4},
        "pipeline": {"groups_per_update": 2, "num_updates": NUM_UPDATES, "max_lag": 2,
                     "ray_address": address, "rollout_resources": {"rollout": 1},
                     "max_actor_restarts": 2, "stall_timeout_s": 600.0},
    })


@pytest.mark.slow
def test_a_run_survives_its_rollout_node_dying(two_nodes, tmp_path) -> None:
    import ray

    cluster, rollout_node = two_nodes
    replaced = []

    def kill_the_rollout_node(metrics: dict) -> None:
        if metrics["step"] == NODE_DIES_AFTER and not replaced:
            # only the rollout node offers `rollout`, and the actor holds it
            assert ray.cluster_resources().get("rollout") == 1
            assert ray.available_resources().get("rollout", 0) == 0
            cluster.remove_node(rollout_node)
            replaced.append(cluster.add_node(num_cpus=1, resources={"rollout": 1}))

    summary = train(_config(tmp_path, cluster.address), on_update=kill_the_rollout_node)

    assert replaced and summary.updates == NUM_UPDATES
    ledger = read_ledger(tmp_path)
    assert ledger["status"] == "finished"
    counts = summary.ledger
    assert counts["generated"] == counts["trained"] + counts["dropped"]
    assert counts["trained"] == NUM_UPDATES * 2
    assert len(set(ledger["trained"])) == len(ledger["trained"])  # none trained twice
    assert summary.faults["actor_restarts"] >= 1
