"""`agent-rl train` with an agent of one's own: examples/word_count_agent.py plays the WordCount
tasks through each rollout actor's OpenAI-compatible endpoint, and the run trains on what it
recorded as on env episodes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_rl.config import ConfigError
from agent_rl.metrics import read_metrics
from agent_rl.orchestrate.pipeline import train
from agent_rl.train_config import TrainConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ray_with_examples() -> Iterator[Any]:
    """Local Ray whose workers can import `examples.*`: they inherit PYTHONPATH at start."""
    ray = pytest.importorskip("ray")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
        patch.syspath_prepend(str(ROOT))
        ray.init(num_cpus=2, include_dashboard=False)
        yield ray
        ray.shutdown()


def agent_config(out_dir: Path, agent: str) -> TrainConfig:
    return TrainConfig.model_validate({
        "model": "tiny",
        "out_dir": out_dir,
        "env": {"id": "agent_rl/WordCount-v0", "agent": agent},
        "rollout": {"group_size": 2, "max_tokens_per_turn": 16},
        "engine": {"max_model_len": 2048, "kv_cache_gib": 0.25},
        "learner": {"lr": 1e-4},
        "pipeline": {"groups_per_update": 1, "groups_in_flight_per_actor": 2, "max_lag": 0,
                     "num_updates": 2, "stall_timeout_s": 300.0},
    })


@pytest.mark.slow
def test_a_run_trains_two_updates_on_an_own_agents_episodes_at_unit_weights(
        ray_with_examples: Any, tmp_path: Path) -> None:
    summary = train(agent_config(tmp_path, "examples.word_count_agent:run"))

    assert summary.updates == 2
    records = read_metrics(summary.run_dir)
    assert [r["policy_version"] for r in records] == [1, 2]
    ledger = summary.ledger
    assert ledger["trained"] == 2 and ledger["generated"] == ledger["trained"] + ledger["dropped"]
    for record in records:
        # The agent's episodes end when it returns (terminated) or run out of context; only
        # the env's own loop truncates WordCount at its max_turns.
        ends = {key for key in record if key.startswith("charts/end_")}
        assert ends and ends <= {"charts/end_terminated", "charts/end_context_budget"}, ends
        assert record["is/tokens"] > 0
        # Matched kernels at lag 0: the learner recomputes the logprobs the endpoint recorded
        # bit for bit, so its ids are the ones the engine sampled from.
        assert record["is/max"] == record["is/min"] == 1.0


def test_env_step_faults_are_refused_for_an_agent_and_env_raise_is_taken(
        tmp_path: Path) -> None:
    config = agent_config(tmp_path, "examples.word_count_agent:run").model_dump(
        exclude_unset=True)
    with pytest.raises(ValueError, match="faults.sandbox_hang_every act on the env's step"):
        TrainConfig.model_validate({**config, "faults": {"sandbox_hang_every": 3}})
    TrainConfig.model_validate({**config, "faults": {"env_raise_every": 3}})


def test_a_wrong_agent_fails_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="env.agent: .*cannot import"):
        train(agent_config(tmp_path, "no_such_agent_module:run"))
