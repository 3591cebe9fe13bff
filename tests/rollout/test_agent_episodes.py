"""A user's agent (`async def run(task, client)`) playing groups through the endpoint, with the
scripted sampler of test_openai_endpoint.py: rewards, seeds, failures and concurrency."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_openai_endpoint import SCRIPT, TASK, ScriptedActor, Served, make_env, next_number
from transformers import AutoTokenizer

from agent_rl.fault_config import FaultConfig
from agent_rl.orchestrate.faults import FaultInjector, FaultyEnvFactory, is_injected_error
from agent_rl.rollout.agents import AgentEpisodes, AgentLoadError, load_agent
from agent_rl.trajectory import END_ENV_ERROR, END_TERMINATED, tool_calls
from envs.tool_env import DEFAULT_SYSTEM_PROMPT
from envs.verifiers import Verdict

AGENT_THREADS: set[str] = set()


async def tool_agent(task: dict[str, Any], client: Any) -> Verdict:
    """The ToolEnv's loop against `openai.AsyncOpenAI` only."""
    AGENT_THREADS.add(threading.current_thread().name)
    tools = [schema for schema in (tool.schema for tool in make_env().tools.values())]
    messages: list[Any] = [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
                           {"role": "user", "content": task["prompt"]}]
    for _ in range(4):
        reply = await client.chat.completions.create(model="m", messages=messages, tools=tools)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            arguments = json.loads(call.function.arguments)
            if call.function.name == "answer":
                correct = arguments["answer"] == task["answer"]
                return Verdict(float(correct), correct, "checked by the agent")
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": json.dumps(next_number(**arguments))})
    return Verdict(0.0, False, "no answer")


async def raising_agent(task: dict[str, Any], client: Any) -> float:
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    raise RuntimeError("the agent's own tool broke")


async def silent_agent(task: dict[str, Any], client: Any) -> float:
    return 1.0


async def one_request_agent(task: dict[str, Any], client: Any) -> float:
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    return 1.0


async def slow_agent(task: dict[str, Any], client: Any) -> float:
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    await asyncio.sleep(5)
    return 1.0


def not_async(task: dict[str, Any], client: Any) -> float:
    return 1.0


class SeededActor(ScriptedActor):
    """The scripted actor with a rollout actor's name and group seeding."""

    name = "scripted"

    def episode_seed(self, group_serial: int, index: int) -> int | None:
        return group_serial * 100 + index


@contextlib.contextmanager
def seeded_endpoint(tiny_model: Path, script: list[str]) -> Iterator[Served]:
    """The scripted endpoint, its actor named and seeding as a rollout actor, playing `script`."""
    state = Served(AutoTokenizer.from_pretrained(tiny_model))
    state.actor = SeededActor(state.actor.tokenizer, script)
    state.endpoint.actor = state.actor  # type: ignore[assignment]
    try:
        yield state
    finally:
        state.loop.run_until_complete(state.endpoint.stop())
        state.loop.close()


@pytest.fixture(scope="module")
def served(tiny_model: Path) -> Iterator[Served]:
    with seeded_endpoint(tiny_model, SCRIPT) as state:
        yield state


def play(served: Served, agent_spec: str, size: int, task: dict[str, Any] = TASK,
         **options: Any) -> Any:
    episodes = AgentEpisodes(served.actor, served.endpoint,  # type: ignore[arg-type]
                             load_agent(agent_spec), **options)
    try:
        return served.loop.run_until_complete(episodes.play_group(task, size, group_seed=3))
    finally:
        episodes.shutdown()


def test_an_agent_group_is_rewarded_by_its_verdict_and_seeded_per_episode(
        served: Served) -> None:
    group = play(served, "test_agent_episodes:tool_agent", 3)

    assert [t.end_reason for t in group.trajectories] == [END_TERMINATED] * 3
    assert group.rewards == [1.0, 1.0, 1.0]
    assert [t.sampling["seed"] for t in group.trajectories] == [300, 301, 302]
    for trajectory in group.trajectories:
        assert trajectory.task_id == TASK["task_id"] and trajectory.num_turns == 2
        assert tool_calls(trajectory) == 1, "next_number counts, the answer call does not"
        assert trajectory.info["verdict"]["detail"] == "checked by the agent"
    assert AGENT_THREADS and all(name.startswith("agent") for name in AGENT_THREADS)


@pytest.mark.parametrize(("spec", "error"), [
    ("test_agent_episodes:raising_agent", "the agent's own tool broke"),
    ("test_agent_episodes:silent_agent", "without calling the endpoint"),
])
def test_an_agent_that_fails_ends_its_episode_as_an_env_error(
        served: Served, spec: str, error: str) -> None:
    (trajectory,) = play(served, spec, 1).trajectories
    assert trajectory.end_reason == END_ENV_ERROR and trajectory.reward == 0.0
    assert error in trajectory.info["error"]


def test_an_agent_past_its_time_limit_ends_as_an_env_error(served: Served) -> None:
    (trajectory,) = play(served, "test_agent_episodes:slow_agent", 1, time_limit_s=1.0).trajectories
    assert trajectory.end_reason == END_ENV_ERROR
    assert "time limit of 1 s" in trajectory.info["error"]


def test_a_turn_under_way_when_the_time_limit_ends_an_episode_is_cancelled(
        served: Served) -> None:
    # The limit leaves time for the agent's thread and client to start on a loaded machine,
    # so that its request is being sampled when the limit strikes.
    served.actor.delay, served.actor.cancelled = 30.0, 0
    try:
        (trajectory,) = play(served, "test_agent_episodes:one_request_agent", 1,
                             time_limit_s=5.0).trajectories
        served.loop.run_until_complete(asyncio.sleep(0.1))
    finally:
        served.actor.delay = 0.0
    assert trajectory.end_reason == END_ENV_ERROR and trajectory.num_turns == 0
    assert served.actor.cancelled == 1, "the engine request was aborted, not left decoding"


def test_an_injected_request_fault_ends_its_episode_as_an_injected_env_error(
        served: Served) -> None:
    """`faults.env_raise_every: 2` in a run with an agent: the second request of the actor fails
    with a 500 error, and its episode ends as the injected error the driver counts as one."""
    factory = FaultyEnvFactory("agent_rl/WordCount-v0", {}, FaultConfig(env_raise_every=2))
    served.actor.request_fault = factory.request_fault  # type: ignore[attr-defined]
    try:
        (trajectory,) = play(served, "test_agent_episodes:tool_agent", 1).trajectories
    finally:
        del served.actor.request_fault  # type: ignore[attr-defined]
    assert trajectory.end_reason == END_ENV_ERROR and trajectory.num_turns == 1
    assert "an agent's request failed on purpose" in trajectory.info["error"]
    assert is_injected_error(trajectory.info)
    injector = FaultInjector(FaultConfig())
    injector.count_episode(trajectory.info)
    assert injector.injected == {"env_raise": 1}


def test_64_concurrent_agent_episodes_complete(served: Served) -> None:
    group = play(served, "test_agent_episodes:tool_agent", 64, threads=64)
    assert group.rewards == [1.0] * 64


@pytest.mark.parametrize(("spec", "message"), [
    ("no_colon", "not 'module:function'"),
    ("no_such_module_here:run", "cannot import"),
    ("test_agent_episodes:not_async", "must be an async function"),
])
def test_an_agent_spec_that_names_no_async_function_is_refused(spec: str, message: str) -> None:
    with pytest.raises(AgentLoadError, match=message):
        load_agent(spec)
