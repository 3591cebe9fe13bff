"""The OpenAI-compatible endpoint in front of the real vLLM engine (tiny random Llama), driven by
the real `openai` client on a thread: its episodes are the env loop's, id for id and logprob for
logprob. The random model writes no tool calls, so the tool result names its tool (`name`), as
the env loop's tool messages do; tool-call parsing is covered by test_openai_endpoint.py.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import torch
from safetensors.torch import load_file
from test_rollout_envs import SYSTEM_PROMPT, CounterToolEnv

from agent_rl.rollout.actor import RolloutActor
from agent_rl.rollout.agents import AgentEpisodes, load_agent
from agent_rl.rollout.chat_tokens import ChatTokens
from agent_rl.rollout.config import RolloutConfig
from agent_rl.rollout.engine import EngineConfig
from agent_rl.rollout.episode import EnvThreads, run_episode
from agent_rl.rollout.openai_server import OpenAIEndpoint
from agent_rl.trajectory import Trajectory

pytestmark = pytest.mark.slow

TASK = {"task_id": "count-2", "turns": 2}


class Served:
    """One actor and its endpoint on one event loop, shared by the module's tests."""

    def __init__(self, model_dir: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.actor = RolloutActor(
            EngineConfig(model=str(model_dir), max_model_len=4096, kv_cache_gib=0.5),
            RolloutConfig(max_tokens_per_turn=16, context_budget=4096),
            env_factory=CounterToolEnv,
        )
        self.endpoint = OpenAIEndpoint(self.actor)

    def run(self, coroutine: Any, timeout: float = 300.0) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coroutine, timeout))


@pytest.fixture(scope="module")
def served(tiny_model: Path) -> Iterator[Served]:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    state = Served(tiny_model)
    state.run(state.actor.start())
    state.run(state.endpoint.start())
    yield state
    state.run(state.endpoint.stop())
    state.run(state.actor.shutdown())
    state.loop.close()


def counter_agent(base_url: str, logprobs: list[list[float]]) -> float:
    """CounterToolEnv's episode played through the openai package: two turns, a count result
    after the first, reward 1."""
    client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0)
    messages: list[Any] = [{"role": "system", "content": SYSTEM_PROMPT},
                           {"role": "user", "content": "Count to three."}]
    for turn in (1, 2):
        reply = client.chat.completions.create(model="tiny", messages=messages, logprobs=True)
        choice = reply.choices[0]
        logprobs.append([entry.logprob for entry in (choice.logprobs.content or [])]
                        if choice.logprobs else [])
        messages.append(choice.message.model_dump(exclude_none=True))
        if turn == 1:
            messages.append({"role": "tool", "tool_call_id": "", "name": "count",
                             "content": "count=1"})
    return 1.0


async def async_counter_agent(task: dict[str, Any], client: Any) -> float:
    """`counter_agent` as an own agent (`agent_rl.rollout.agents`), on `openai.AsyncOpenAI`."""
    messages: list[Any] = [{"role": "system", "content": SYSTEM_PROMPT},
                           {"role": "user", "content": "Count to three."}]
    for turn in (1, 2):
        reply = await client.chat.completions.create(model="tiny", messages=messages)
        messages.append(reply.choices[0].message.model_dump(exclude_none=True))
        if turn == 1:
            messages.append({"role": "tool", "tool_call_id": "", "name": "count",
                             "content": "count=1"})
    return 1.0


def test_an_openai_client_episode_is_the_env_loops_episode_id_for_id(served: Served) -> None:
    seed = 4242
    key = served.endpoint.open_episode("count-2", "counting", seed=seed)
    logprobs: list[list[float]] = []
    served.run(asyncio.to_thread(counter_agent, served.endpoint.base_url(key), logprobs))
    (trajectory,) = served.endpoint.finish_episode(key, 1.0, group_id="g")

    threads = EnvThreads(1)
    record = served.run(run_episode(
        served.actor.sample_turn, threads, CounterToolEnv, TASK, seed,
        tokenizer=served.actor.tokenizer, context_budget=served.actor.context_budget))
    threads.shutdown()
    env_loop = record.to_trajectory("g", served.actor.sampling_record(seed))

    assert trajectory.token_ids == env_loop.token_ids
    assert trajectory.loss_mask == env_loop.loss_mask
    assert trajectory.behavior_logprobs == env_loop.behavior_logprobs
    assert trajectory.policy_versions == env_loop.policy_versions
    assert (trajectory.num_turns, trajectory.reward, trajectory.end_reason) == (
        2, 1.0, "terminated")
    assert trajectory.sampling == env_loop.sampling
    sampled = [lp for lp, mask in zip(trajectory.behavior_logprobs, trajectory.loss_mask,
                                      strict=True) if mask]
    assert [lp for turn in logprobs for lp in turn] == sampled


def test_the_recorded_ids_are_the_templates_rendering_of_the_conversation(
        served: Served) -> None:
    key = served.endpoint.open_episode(seed=7)
    logprobs: list[list[float]] = []
    served.run(asyncio.to_thread(counter_agent, served.endpoint.base_url(key), logprobs))
    (trajectory,) = served.endpoint.finish_episode(key, 1.0, group_id="g")

    chat = ChatTokens(served.actor.tokenizer)
    tokenizer = served.actor.tokenizer
    sampled_turns = _sampled_runs(trajectory)
    texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in sampled_turns]
    conversation = [{"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": "Count to three."},
                    {"role": "assistant", "content": texts[0]},
                    {"role": "tool", "name": "count", "content": "count=1"},
                    {"role": "assistant", "content": texts[1]}]
    rendered = chat.render(conversation, add_generation_prompt=False)
    decoded = tokenizer.decode(trajectory.token_ids)
    closed = sampled_turns[-1][-1] == chat.stop_token_id
    assert decoded == (rendered[: -len(chat.assistant_closing)] + ("<|im_end|>" if closed else ""))


def _sampled_runs(trajectory: Trajectory) -> list[list[int]]:
    runs: list[list[int]] = []
    previous = 0
    for token, mask in zip(trajectory.token_ids, trajectory.loss_mask, strict=True):
        if mask and not previous:
            runs.append([])
        if mask:
            runs[-1].append(token)
        previous = mask
    return runs


def streaming_counter_agent(base_url: str) -> float:
    """`counter_agent` with streamed replies, adding up each message from its chunks."""
    client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0)
    messages: list[Any] = [{"role": "system", "content": SYSTEM_PROMPT},
                           {"role": "user", "content": "Count to three."}]
    for turn in (1, 2):
        chunks = client.chat.completions.create(model="tiny", messages=messages, stream=True)
        content = "".join(chunk.choices[0].delta.content or "" for chunk in chunks
                          if chunk.choices)
        messages.append({"role": "assistant", "content": content})
        if turn == 1:
            messages.append({"role": "tool", "tool_call_id": "", "name": "count",
                             "content": "count=1"})
    return 1.0


def test_a_streamed_episode_samples_and_records_what_a_plain_one_does(served: Served) -> None:
    key = served.endpoint.open_episode(seed=31)
    served.run(asyncio.to_thread(streaming_counter_agent, served.endpoint.base_url(key)))
    (streamed,) = served.endpoint.finish_episode(key, 1.0, group_id="g")
    key = served.endpoint.open_episode(seed=31)
    served.run(asyncio.to_thread(counter_agent, served.endpoint.base_url(key), []))
    (plain,) = served.endpoint.finish_episode(key, 1.0, group_id="g")

    assert streamed.num_turns == 2
    assert streamed.token_ids == plain.token_ids
    assert streamed.behavior_logprobs == plain.behavior_logprobs
    assert streamed.policy_versions == plain.policy_versions


def test_64_concurrent_agent_episodes_on_one_actor_complete(served: Served) -> None:
    players = AgentEpisodes(served.actor, served.endpoint,
                            load_agent("test_openai_endpoint_engine:async_counter_agent"),
                            threads=64)
    try:
        group = served.run(players.play_group({"task_id": "count-64"}, 64))
    finally:
        players.shutdown()
    assert len(group.trajectories) == 64
    assert {(t.end_reason, t.num_turns, t.reward) for t in group.trajectories} == {
        ("terminated", 2, 1.0)}


def test_top_logprobs_rank_the_alternatives_and_leave_the_record_alone(served: Served) -> None:
    def ask(top: int) -> Any:
        key = served.endpoint.open_episode(seed=13)
        client = openai.OpenAI(base_url=served.endpoint.base_url(key), api_key="none",
                               max_retries=0)
        reply = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Count to three."}],
            logprobs=True, **({"top_logprobs": top} if top else {}))
        return reply, served.endpoint.finish_episode(key, 0.0, group_id="g")[0]

    (plain, plain_record), (ranked, ranked_record) = served.run(asyncio.to_thread(ask, 0)), \
        served.run(asyncio.to_thread(ask, 5))
    assert ranked_record.token_ids == plain_record.token_ids
    assert ranked_record.behavior_logprobs == plain_record.behavior_logprobs
    entries = ranked.choices[0].logprobs.content
    assert all(not entry.top_logprobs for entry in plain.choices[0].logprobs.content)
    for entry in entries:
        alternatives = [alt.logprob for alt in entry.top_logprobs]
        assert len(alternatives) == 5 and alternatives == sorted(alternatives, reverse=True)
        # greedy or sampled, the token drawn is never likelier than the most likely one
        assert entry.logprob <= alternatives[0] + 1e-6
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        served.run(asyncio.to_thread(ask, 21))


def test_turns_sampled_after_a_weight_update_carry_its_version(
        served: Served, tiny_model: Path) -> None:
    """Runs last: it moves the module's actor to version 1."""
    key = served.endpoint.open_episode(seed=9)
    client = openai.OpenAI(base_url=served.endpoint.base_url(key), api_key="none",
                           max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "Count to three."}]

    def one_turn() -> None:
        reply = client.chat.completions.create(model="tiny", messages=messages)
        messages.append(reply.choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": "", "name": "count",
                         "content": f"count={len(messages) // 2}"})

    served.run(asyncio.to_thread(one_turn))
    weights = load_file(str(tiny_model / "model.safetensors"))
    generator = torch.Generator().manual_seed(7)
    perturbed = {name: tensor + 0.01 * torch.randn(tensor.shape, generator=generator,
                                                   dtype=tensor.dtype)
                 for name, tensor in weights.items()}
    served.run(served.actor.update_weights(1, perturbed))
    served.run(asyncio.to_thread(one_turn))
    (trajectory,) = served.endpoint.finish_episode(key, 0.0, group_id="g")

    runs = _sampled_runs(trajectory)
    versions = [v for v, mask in zip(trajectory.policy_versions, trajectory.loss_mask,
                                     strict=True) if mask]
    assert versions == [0] * len(runs[0]) + [1] * len(runs[1])
