"""The OpenAI-compatible endpoint with the real `openai` client, server and tokenizer, and a
scripted sampler in place of vLLM: the model "writes" Hermes tool calls that a random tiny model
never would, so tool-call parsing and the token-exact record can be checked against the env loop.
The same endpoint with the real engine is in test_openai_endpoint_engine.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from transformers import AutoTokenizer

from agent_rl.rollout.config import RolloutConfig
from agent_rl.rollout.episode import EnvThreads, SampledTurn, run_episode
from agent_rl.rollout.openai_server import OpenAIEndpoint
from agent_rl.trajectory import SEGMENT, Trajectory
from envs.tool_env import DEFAULT_SYSTEM_PROMPT, ToolEnv

TASK = {"task_id": "count-1", "category": "counting", "prompt": "What comes after 41?",
        "answer": "42"}
BUDGET = 4096


def next_number(n: int) -> int:
    """The number after n.

    Args:
        n: any integer.
    """
    return n + 1


def make_env() -> ToolEnv:
    return ToolEnv([TASK], tools=[next_number])


def call_text(name: str, arguments: dict[str, Any]) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


class ScriptedActor:
    """What the endpoint needs of a rollout actor, sampling turns from a script: each turn's ids
    are the tokenizer's ids of the scripted text plus the stop token, as a model would emit
    them; logprobs and versions are made up but distinct per turn."""

    def __init__(self, tokenizer: Any, script: list[str]) -> None:
        self.tokenizer = tokenizer
        self.context_budget = BUDGET
        self.config = RolloutConfig()
        self.script = script
        self.calls: list[tuple[int, int | None]] = []
        self.stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.header = tokenizer("<|im_start|>assistant", add_special_tokens=False)["input_ids"]
        self.delay = 0.0  # seconds each turn takes, to let a client give up on it
        self.token_delay = 0.001  # seconds between a streamed turn's tokens
        self.cancelled = 0

    async def sample_turn(self, token_ids: list[int], room: int, seed: int | None,
                          on_tokens: Callable[[list[int]], None] | None = None) -> SampledTurn:
        # The prompt's assistant headers tell which turn of its episode this is.
        width = len(self.header)
        headers = sum(token_ids[i:i + width] == self.header for i in range(len(token_ids)))
        turn = (headers - 1) % len(self.script)
        self.calls.append((len(token_ids), seed))
        ids = [*self.tokenizer(self.script[turn], add_special_tokens=False)["input_ids"],
               self.stop][:room]
        try:
            await asyncio.sleep(self.delay)
            for length in range(1, len(ids) + 1 if on_tokens else 0):
                on_tokens(ids[:length])  # type: ignore[misc]
                await asyncio.sleep(self.token_delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        logprobs = [-0.5 - turn - i / 100 for i in range(len(ids))]
        stop = self.stop if ids[-1] == self.stop else None
        return SampledTurn(ids, logprobs, [3] * len(ids), "stop" if stop else "length", stop)

    def sampling_record(self, seed: int | None) -> dict[str, Any]:
        return {"seed": seed}


SCRIPT = ["Let me count. " + call_text("next_number", {"n": 41}),
          call_text("answer", {"answer": "42"})]


class Served:
    """The endpoint on its own event loop; agents run on threads, as they must."""

    def __init__(self, tokenizer: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.actor = ScriptedActor(tokenizer, SCRIPT)
        self.endpoint = OpenAIEndpoint(self.actor)  # type: ignore[arg-type]
        self.loop.run_until_complete(self.endpoint.start())

    def play(self, agent: Callable[[openai.OpenAI], float], seed: int = 5) -> Trajectory:
        self.actor.calls.clear()
        key = self.endpoint.open_episode(TASK["task_id"], TASK["category"], seed=seed)
        client = openai.OpenAI(base_url=self.endpoint.base_url(key), api_key="none",
                               max_retries=0)
        reward = self.loop.run_until_complete(asyncio.to_thread(agent, client))
        (trajectory,) = self.endpoint.finish_episode(key, reward, group_id="g")
        return trajectory


@pytest.fixture(scope="module")
def served(tiny_model: Path) -> Iterator[Served]:
    state = Served(AutoTokenizer.from_pretrained(tiny_model))
    yield state
    state.loop.run_until_complete(state.endpoint.stop())
    state.loop.close()


def streamed_message(chunks: Any) -> dict[str, Any]:
    """The assistant message a streaming client adds up from the chunks."""
    content, calls = "", []
    for chunk in chunks:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            calls += [call.model_dump(exclude_none=True, exclude={"index"})
                      for call in choice.delta.tool_calls or []]
    return {"role": "assistant", "content": content or None,
            **({"tool_calls": calls} if calls else {})}


def tool_agent(client: openai.OpenAI, stream: bool = False) -> float:
    """The ToolEnv's loop written against the openai package: the same system text and tools,
    tool calls run locally, rewarded 1 for the right answer."""
    tools = [schema for schema in (tool.schema for tool in make_env().tools.values())]
    messages: list[Any] = [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
                           {"role": "user", "content": TASK["prompt"]}]
    for _ in range(4):
        reply = client.chat.completions.create(model="tiny", messages=messages, tools=tools,
                                               stream=stream)
        message = (streamed_message(reply) if stream
                   else reply.choices[0].message.model_dump(exclude_none=True))
        messages.append(message)
        for call in message.get("tool_calls", []):
            arguments = json.loads(call["function"]["arguments"])
            if call["function"]["name"] == "answer":
                return float(arguments["answer"] == TASK["answer"])
            messages.append({"role": "tool", "tool_call_id": call["id"],
                             "content": json.dumps(next_number(**arguments))})
    return 0.0


def env_loop_trajectory(served: Served, seed: int) -> Trajectory:
    actor = ScriptedActor(served.actor.tokenizer, SCRIPT)
    threads = EnvThreads(1)
    record = served.loop.run_until_complete(run_episode(
        actor.sample_turn, threads, make_env, TASK, seed, tokenizer=actor.tokenizer,
        context_budget=BUDGET))
    threads.shutdown()
    served.actor.env_loop_calls = actor.calls  # type: ignore[attr-defined]
    return record.to_trajectory("g", {"seed": seed})


def test_hermes_calls_come_back_as_openai_tool_calls(served: Served) -> None:
    def agent(client: openai.OpenAI) -> float:
        reply = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}],
            tools=[tool.schema for tool in make_env().tools.values()])
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content == "Let me count."
        (call,) = choice.message.tool_calls or []
        assert call.type == "function" and call.function.name == "next_number"
        assert json.loads(call.function.arguments) == {"n": 41}
        return 0.0

    served.play(agent)


def test_an_openai_agent_episode_has_the_env_loops_ids_masks_logprobs_and_seeds(
        served: Served) -> None:
    served_trajectory = served.play(tool_agent, seed=11)
    env_trajectory = env_loop_trajectory(served, seed=11)

    assert served_trajectory.token_ids == env_trajectory.token_ids
    assert served_trajectory.loss_mask == env_trajectory.loss_mask
    assert served_trajectory.behavior_logprobs == env_trajectory.behavior_logprobs
    assert served_trajectory.policy_versions == env_trajectory.policy_versions
    assert served.actor.calls == served.actor.env_loop_calls  # same prompt lengths and seeds
    assert (served_trajectory.num_turns, served_trajectory.reward,
            served_trajectory.end_reason) == (2, 1.0, "terminated")
    assert env_trajectory.reward == 1.0
    assert (served_trajectory.task_id, served_trajectory.category) == ("count-1", "counting")


def test_logprobs_on_request_are_the_sampled_tokens_behavior_logprobs(served: Served) -> None:
    seen: list[float] = []

    def agent(client: openai.OpenAI) -> float:
        reply = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], logprobs=True)
        assert reply.choices[0].logprobs is not None
        seen.extend(entry.logprob for entry in reply.choices[0].logprobs.content or [])
        return 0.0

    trajectory = served.play(agent)
    sampled = [lp for lp, mask in zip(trajectory.behavior_logprobs, trajectory.loss_mask,
                                      strict=True) if mask]
    assert seen == sampled and len(seen) > 0


def test_a_streamed_turn_sends_its_text_as_sampled_and_its_calls_at_the_end(
        served: Served) -> None:
    def agent(client: openai.OpenAI) -> float:
        chunks = list(client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], stream=True,
            tools=[tool.schema for tool in make_env().tools.values()]))
        texts = [chunk.choices[0].delta.content for chunk in chunks
                 if chunk.choices and chunk.choices[0].delta.content]
        assert len(texts) > 2, "the text comes token by token"
        assert "".join(texts) == "Let me count."
        assert not any("<" in text for text in texts), "no tool-call markup in the content"
        (call,) = streamed_message(chunks)["tool_calls"]
        assert call["function"]["name"] == "next_number"
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        return 0.0

    served.play(agent)


def test_a_streamed_episode_records_what_a_plain_one_does(served: Served) -> None:
    streamed = served.play(lambda client: tool_agent(client, stream=True), seed=11)
    plain = served.play(tool_agent, seed=11)
    assert streamed.reward == plain.reward == 1.0
    assert (streamed.token_ids, streamed.loss_mask, streamed.behavior_logprobs) == (
        plain.token_ids, plain.loss_mask, plain.behavior_logprobs)


def test_an_edited_assistant_turn_is_refused_naming_the_message(served: Served) -> None:
    def agent(client: openai.OpenAI) -> float:
        messages: list[Any] = [{"role": "user", "content": "hi"}]
        reply = client.chat.completions.create(model="tiny", messages=messages)
        edited = {"role": "assistant", "content": (reply.choices[0].message.content or "") + "!"}
        with pytest.raises(openai.BadRequestError,
                           match=r"messages\[1\]: content differs") as refused:
            client.chat.completions.create(
                model="tiny", messages=[*messages, edited, {"role": "user", "content": "go"}])
        assert refused.value.code == "history_mismatch"
        with pytest.raises(openai.BadRequestError, match=r"messages\[1\]"):
            client.chat.completions.create(model="tiny", messages=messages)
        return 0.0

    trajectory = served.play(agent)
    assert trajectory.num_turns == 1, "a refused request samples nothing"


def test_an_edited_history_starts_a_new_segment_when_the_run_asks_for_it(
        served: Served) -> None:
    """`agent_history: new_segment`: an agent that summarizes its history gets its turn; the
    episode comes back as two segments, the second's prompt rendered from the summary as a first
    request's would be, and only turns the model sampled are marked as trained."""
    tools = [tool.schema for tool in make_env().tools.values()]
    opening = [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
               {"role": "user", "content": TASK["prompt"]}]
    summary = [*opening, {"role": "user", "content": "You called next_number(41): it said 42."}]

    def agent(client: openai.OpenAI) -> None:
        client.chat.completions.create(model="tiny", messages=opening, tools=tools)
        client.chat.completions.create(model="tiny", messages=summary, tools=tools)

    def fresh(client: openai.OpenAI) -> None:
        client.chat.completions.create(model="tiny", messages=summary, tools=tools)

    def episode(play: Any) -> list[Trajectory]:
        key = served.endpoint.open_episode(TASK["task_id"], TASK["category"], seed=5)
        client = openai.OpenAI(base_url=served.endpoint.base_url(key), api_key="none",
                               max_retries=0)
        served.loop.run_until_complete(asyncio.to_thread(play, client))
        return served.endpoint.finish_episode(key, 1.0, group_id="g")

    served.actor.config = RolloutConfig(agent_history="new_segment")
    try:
        first, second = episode(agent)
    finally:
        served.actor.config = RolloutConfig()
    (alone,) = episode(fresh)

    assert first.info[SEGMENT]["index"] == 0 and first.info[SEGMENT]["count"] == 2
    assert "messages[2]" in first.info[SEGMENT]["closed_by"]
    assert second.info[SEGMENT] == {"index": 1, "count": 2}
    assert (first.reward, second.reward) == (1.0, 1.0)
    assert (first.num_turns, second.num_turns) == (1, 2), "the last segment has the total"
    assert second.token_ids == alone.token_ids and second.loss_mask == alone.loss_mask
    assert sum(alone.loss_mask) and not any(second.loss_mask[:second.loss_mask.index(1)])
    assert SEGMENT not in alone.info


def test_reserialized_tool_call_arguments_still_match(served: Served) -> None:
    def agent(client: openai.OpenAI) -> float:
        messages: list[Any] = [{"role": "user", "content": "hi"}]
        tools = [tool.schema for tool in make_env().tools.values()]
        message = client.chat.completions.create(
            model="tiny", messages=messages, tools=tools).choices[0].message
        echoed = message.model_dump()
        (call,) = echoed["tool_calls"]
        call["function"]["arguments"] = json.dumps(json.loads(call["function"]["arguments"]),
                                                   indent=2)
        client.chat.completions.create(model="tiny", tools=tools, messages=[
            *messages, echoed, {"role": "tool", "tool_call_id": call["id"], "content": "42"}])
        return 0.0

    assert served.play(agent).num_turns == 2


def test_a_finished_episode_answers_not_found(served: Served) -> None:
    key = served.endpoint.open_episode()
    served.endpoint.finish_episode(key, 0.0, group_id="g")
    client = openai.OpenAI(base_url=served.endpoint.base_url(key), api_key="none",
                           max_retries=0)

    def ask() -> None:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}])

    with pytest.raises(openai.NotFoundError, match="no open episode"):
        served.loop.run_until_complete(asyncio.to_thread(ask))


def _wait_for_a_cancel(actor: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not actor.cancelled and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_client_that_gives_up_cancels_its_turn_and_may_send_it_again(served: Served) -> None:
    messages = [{"role": "user", "content": "hi"}]

    def agent(client: openai.OpenAI) -> float:
        served.actor.delay = 30.0
        impatient = client.with_options(timeout=0.5)
        with pytest.raises(openai.APITimeoutError):
            impatient.chat.completions.create(model="tiny", messages=messages)
        _wait_for_a_cancel(served.actor)
        served.actor.delay = 0.0
        client.chat.completions.create(model="tiny", messages=messages)
        return 0.0

    served.actor.cancelled = 0
    trajectory = served.play(agent)
    assert served.actor.cancelled == 1, "the abandoned turn's sampling was cancelled"
    fresh = served.play(lambda client: client.chat.completions.create(
        model="tiny", messages=messages) and 0.0)
    assert trajectory.num_turns == 1
    assert trajectory.token_ids == fresh.token_ids, "the abandoned request left nothing behind"


def test_the_models_list_names_the_served_model(served: Served) -> None:
    key = served.endpoint.open_episode()
    client = openai.OpenAI(base_url=served.endpoint.base_url(key), api_key="none",
                           max_retries=0)
    models = served.loop.run_until_complete(asyncio.to_thread(lambda: list(client.models.list())))
    assert [model.id for model in models] == ["agent-rl"]
    served.endpoint.finish_episode(key, 0.0, group_id="g")


def test_a_client_that_leaves_mid_stream_cancels_its_turn(served: Served) -> None:
    messages = [{"role": "user", "content": "hi"}]

    def agent(client: openai.OpenAI) -> float:
        served.actor.token_delay = 1.0
        stream = client.chat.completions.create(model="tiny", messages=messages, stream=True)
        next(iter(stream))
        stream.close()
        _wait_for_a_cancel(served.actor)
        served.actor.token_delay = 0.001
        client.chat.completions.create(model="tiny", messages=messages)
        return 0.0

    served.actor.cancelled = 0
    trajectory = served.play(agent)
    assert served.actor.cancelled == 1
    assert trajectory.num_turns == 1
