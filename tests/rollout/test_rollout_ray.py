"""The rollout actor as a real Ray actor: groups out, weights in through the object store.

This starts a second engine (inside the Ray actor), so it is kept to one short test.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_rollout_envs
from safetensors.torch import load_file

from agent_rl.rollout.actor import make_rollout_actor
from agent_rl.rollout.config import RolloutConfig
from agent_rl.rollout.engine import EngineConfig

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    # The test env lives in a test module the Ray worker cannot import; ship it by value.
    ray.cloudpickle.register_pickle_by_value(test_rollout_envs)
    yield
    ray.shutdown()


def test_ray_actor_samples_groups_and_takes_weights_from_the_object_store(
    ray_session: None, tiny_model: Path
) -> None:
    actor = make_rollout_actor(
        EngineConfig(model=str(tiny_model), max_model_len=1024, kv_cache_gib=0.5),
        RolloutConfig(max_tokens_per_turn=16, seed=0),
        env_factory=test_rollout_envs.CounterToolEnv,
        name="ray-rollout-test",
    )
    metadata = ray.get(actor.start.remote(), timeout=300)
    assert metadata["engine"]["enable_prefix_caching"] is False

    group = ray.get(actor.generate_group.remote({"task_id": "ray", "turns": 2}, 2), timeout=120)
    assert [t.end_reason for t in group.trajectories] == ["terminated", "terminated"]
    assert all(set(t.policy_versions) == {-1, 0} for t in group.trajectories)

    weights_ref = ray.put(load_file(str(tiny_model / "model.safetensors")))
    started = time.perf_counter()
    timing = ray.get(actor.update_weights.remote(1, weights_ref), timeout=120)
    print(f"weight update through Ray: {time.perf_counter() - started:.3f}s ({timing})")
    assert ray.get(actor.get_policy_version.remote()) == 1

    group = ray.get(actor.generate_group.remote({"task_id": "ray", "turns": 1}, 1), timeout=120)
    assert set(group.trajectories[0].policy_versions) == {-1, 1}
    ray.get(actor.shutdown.remote(), timeout=60)
