"""The rollout actor through the real vLLM engine (tiny random Llama) and a real tool env.

One engine serves the whole module; all coroutines run on one event loop because AsyncLLM's
output handler belongs to the loop that first used it.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch
from safetensors.torch import load_file
from test_rollout_envs import CounterToolEnv
from transformers import AutoTokenizer

from agent_rl.rollout.actor import RolloutActor
from agent_rl.rollout.chat_tokens import ChatTokens
from agent_rl.rollout.config import RolloutConfig
from agent_rl.rollout.engine import EngineConfig
from agent_rl.rollout.weight_sync import WeightVersionError
from agent_rl.trajectory import Trajectory, group_lag

pytestmark = pytest.mark.slow

T = TypeVar("T")
MAX_MODEL_LEN = 16384  # the context the mission asks for; the tiny model's KV is 1 KB a token


class Session:
    """The actor, its event loop and the envs it created, shared by every test here."""

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = model_dir
        self.loop = asyncio.new_event_loop()
        self.envs: list[CounterToolEnv] = []
        self.actor = RolloutActor(
            EngineConfig(model=str(model_dir), max_model_len=MAX_MODEL_LEN, kv_cache_gib=1.0),
            RolloutConfig(
                max_tokens_per_turn=24, seed=1234, context_budget=MAX_MODEL_LEN
            ),
            env_factory=lambda: CounterToolEnv(self.envs),
        )
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coroutine, timeout))


@pytest.fixture(scope="module")
def session(tiny_model: Path) -> Iterator[Session]:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    state = Session(tiny_model)
    state.run(state.actor.start(), timeout=300)
    yield state
    state.run(state.actor.shutdown())
    state.loop.close()


def sampled_positions(trajectory: Trajectory) -> list[int]:
    return [i for i, mask in enumerate(trajectory.loss_mask) if mask]


def perturbed_weights(model_dir: Path, scale: float) -> dict[str, torch.Tensor]:
    weights = load_file(str(model_dir / "model.safetensors"))
    generator = torch.Generator().manual_seed(7)
    return {
        name: tensor + scale * torch.randn(tensor.shape, generator=generator, dtype=tensor.dtype)
        for name, tensor in weights.items()
    }


def test_trajectory_ids_masks_and_text_follow_the_chat_template(session: Session) -> None:
    task = {"task_id": "count-3", "turns": 3}
    group = session.run(session.actor.generate_group(task, group_size=3))

    assert len(group.trajectories) == 3
    assert {t.group_id for t in group.trajectories} == {group.group_id}
    assert len({tuple(t.token_ids) for t in group.trajectories}) == 3, "seeds must differ"
    for trajectory in group.trajectories:
        assert trajectory.task_id == "count-3" and trajectory.category == "counting"
        assert trajectory.end_reason == "terminated" and trajectory.reward == 1.0
        assert trajectory.num_turns == 3
        n = len(trajectory.token_ids)
        assert n <= session.actor.context_budget
        for i in range(n):
            if trajectory.loss_mask[i]:
                assert trajectory.policy_versions[i] == 0
                assert trajectory.behavior_logprobs[i] <= 0.0
            else:
                assert trajectory.policy_versions[i] == -1
                assert trajectory.behavior_logprobs[i] == 0.0
        assert trajectory.num_model_tokens == 3 * 24
        assert trajectory.sampling["temperature"] == 1.0
        assert trajectory.sampling["logprobs_mode"] == "processed_logprobs"

    # The ids, decoded, are exactly the template's rendering of the conversation that happened.
    chat = ChatTokens(session.tokenizer)
    expected = set()
    for env in (e for e in session.envs if e.task.get("task_id") == "count-3"):
        messages, _ = CounterToolEnv().reset(options={"task": task})
        for turn, action in enumerate(env.actions, start=1):
            messages.append({"role": "assistant", "content": action})
            messages.append({"role": "tool", "name": "count", "content": f"count={turn}"})
        text = chat.render(messages[:-1], add_generation_prompt=False)
        expected.add(text[: -len(chat.assistant_closing)])  # the last turn was cut off unclosed
    assert {session.tokenizer.decode(t.token_ids) for t in group.trajectories} == expected


def test_behavior_logprobs_match_vllm_teacher_forced_recompute(session: Session) -> None:
    group = session.run(session.actor.generate_group({"task_id": "lp", "turns": 2}, 2))
    for trajectory in group.trajectories:
        recomputed = session.run(session.actor.prompt_logprobs(trajectory.token_ids))
        positions = sampled_positions(trajectory)
        diffs = [abs(recomputed[i - 1] - trajectory.behavior_logprobs[i]) for i in positions]
        assert max(diffs) <= 1e-5, f"max |behavior - recomputed| = {max(diffs)}"


def test_env_error_ends_only_its_episode(session: Session) -> None:
    group = session.run(session.actor.generate_group({"task_id": "boom", "mode": "raise"}, 2))
    for trajectory in group.trajectories:
        assert trajectory.end_reason == "env_error"
        assert "the counter tool crashed" in trajectory.info["error"]
        assert trajectory.num_turns == 1 and trajectory.reward == 0.0


def test_long_tool_outputs_run_a_16k_episode_to_the_context_budget(session: Session) -> None:
    task = {"task_id": "long", "turns": 0, "tool_chars": 8000}
    started = time.perf_counter()
    group = session.run(session.actor.generate_group(task, 1), timeout=600)
    elapsed = time.perf_counter() - started
    for trajectory in group.trajectories:
        assert trajectory.end_reason == "context_budget"
        assert len(trajectory.token_ids) <= session.actor.context_budget
        assert len(trajectory.token_ids) > session.actor.context_budget - 1000
        assert trajectory.num_turns >= 2
    print(f"a {MAX_MODEL_LEN}-token episode took {elapsed:.1f}s")


def test_weight_update_mid_episode_versions_following_tokens(session: Session) -> None:
    actor = session.actor
    old_version = actor.policy_version
    new_version = old_version + 1
    gate = {"reached": threading.Event(), "release": threading.Event()}

    async def scenario() -> Any:
        rollout = asyncio.ensure_future(
            actor.generate_group({"task_id": "mid", "turns": 2, "gate": gate}, 1)
        )
        while not gate["reached"].is_set():
            await asyncio.sleep(0.01)
        timing = await actor.update_weights(new_version, perturbed_weights(session.model_dir, 0.05))
        gate["release"].set()
        return await rollout, timing

    group, timing = session.run(scenario())
    trajectory = group.trajectories[0]
    versions = [trajectory.policy_versions[i] for i in sampled_positions(trajectory)]
    assert versions == [old_version] * 24 + [new_version] * 24
    assert timing.total_s < 30
    # The new tokens were sampled from the new weights: a recompute with them agrees.
    recomputed = session.run(actor.prompt_logprobs(trajectory.token_ids))
    last_turn = sampled_positions(trajectory)[24:]
    diffs = [abs(recomputed[i - 1] - trajectory.behavior_logprobs[i]) for i in last_turn]
    assert max(diffs) <= 1e-5


def test_weight_update_inside_one_turn_splits_its_versions(session: Session) -> None:
    actor = session.actor
    version = actor.policy_version + 1
    prompt = session.tokenizer("Count with me:", add_special_tokens=False)["input_ids"]

    async def scenario() -> Any:
        turn = asyncio.ensure_future(actor.sample(prompt, 1000, seed=3, min_tokens=1000))
        await asyncio.sleep(0.2)
        await actor.update_weights(version, perturbed_weights(session.model_dir, 0.02))
        return await turn

    turn = session.run(scenario())
    assert len(turn.token_ids) == 1000
    assert turn.versions[0] == version - 1, turn.versions[:5] and turn.versions[-1] == version
    assert turn.versions == sorted(turn.versions)


def test_restoring_old_weights_restores_old_outputs_exactly(session: Session) -> None:
    actor = session.actor
    prompt = session.tokenizer("Once upon a time", add_special_tokens=False)["input_ids"]
    base_weights = load_file(str(session.model_dir / "model.safetensors"))

    def sample_pair() -> tuple[list[int], list[int]]:
        greedy = session.run(actor.sample(prompt, 32, temperature=0.0))
        seeded = session.run(actor.sample(prompt, 32, seed=11))
        return greedy.token_ids, seeded.token_ids

    session.run(actor.update_weights(actor.policy_version + 1, base_weights))
    before = sample_pair()
    session.run(actor.update_weights(actor.policy_version + 1, perturbed_weights(session.model_dir, 0.5)))
    changed = sample_pair()
    session.run(actor.update_weights(actor.policy_version + 1, base_weights))
    restored = sample_pair()
    assert changed[0] != before[0] and changed[1] != before[1]
    assert restored == before


def test_weight_versions_must_grow(session: Session) -> None:
    with pytest.raises(WeightVersionError, match="not newer"):
        session.run(session.actor.update_weights(session.actor.policy_version, {}))


def test_requests_submitted_during_a_weight_load_share_no_prefix_cache(session: Session) -> None:
    actor = session.actor
    version = actor.policy_version + 1
    prompt = session.tokenizer("Salted while loading:", add_special_tokens=False)["input_ids"]

    async def scenario() -> tuple[str, str, Any, str]:
        update = asyncio.ensure_future(
            actor.update_weights(version, perturbed_weights(session.model_dir, 0.01))
        )
        await asyncio.sleep(0)  # the update runs to its first wait: the engine's pause
        during = actor.cache_salt("r1")
        turn = asyncio.ensure_future(actor.sample(prompt, 8, seed=5))
        await update
        return during, actor.cache_salt("r1"), await turn, actor.cache_salt("r2")

    during, after, turn, other = session.run(scenario())
    assert during == "loading-r1"
    assert after == other == f"policy-{version}"
    assert turn.versions == sorted(turn.versions) and turn.versions[-1] <= version
    assert not turn.fresh_context  # left out of the learner's kernel-mismatch metric


def test_group_carries_the_callers_id_and_its_sampling_version(session: Session) -> None:
    actor = session.actor
    group = session.run(actor.generate_group({"task_id": "lag", "turns": 1}, 1,
                                             group_id="group-00000042"))
    assert group.group_id == "group-00000042"
    assert all(t.group_id == "group-00000042" for t in group.trajectories)
    assert group_lag(group, actor.policy_version) == 0
    assert group_lag(group, actor.policy_version + 5) == 5
