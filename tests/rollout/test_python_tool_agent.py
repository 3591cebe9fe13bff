"""examples/python_tool_agent.py, the main job's tasks played over the `openai` client, against
`agent_rl/PythonTool-v0`'s own env loop: with the same sampled turns (a scripted sampler that
calls the sandboxed interpreter, writes a malformed call, forgets to call, then answers), both
paths give the same ids, masks, logprobs and reward."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_agent_episodes import SeededActor, play, seeded_endpoint
from test_openai_endpoint import Served, call_text

from agent_rl.rollout.episode import EnvThreads, run_episode
from agent_rl.trajectory import END_TERMINATED, tool_calls
from envs.python_tool import PythonToolEnv
from envs.sandbox_pool import close_shared_pools

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None,
                                reason="bubblewrap (bwrap) is not installed: no interpreter")

ROOT = Path(__file__).resolve().parents[2]
TASK = {"task_id": "arithmetic-1", "category": "arithmetic", "prompt": "What is 169 - 85?",
        "answer": "84", "verifier": "numeric"}
SCRIPT = [
    "I will compute it. " + call_text("python", {"code": "x = 169 - 85\nprint(x)"}),
    call_text("python", {"source": "x"}),  # the wrong argument name: a malformed call
    "It is x.",  # no call at all: the env's feedback comes as a user turn
    call_text("python", {"code": "x * 1"}) + call_text("answer", {"answer": "84"}),
]


@pytest.fixture(scope="module")
def served(tiny_model: Path) -> Iterator[Served]:
    # Fresh interpreters for both paths: late in a long test process, sessions pooled earlier
    # have been found dead before their first call (the kernel gone, exit status 0), which
    # would put the restart notice where the interpreter's output belongs in both episodes.
    close_shared_pools()
    with seeded_endpoint(tiny_model, SCRIPT) as state:
        yield state


def test_the_agent_plays_the_env_loops_episode_token_for_token(
        served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    group = play(served, "examples.python_tool_agent:run", 1, task=TASK)
    (played,) = group.trajectories

    env_actor = SeededActor(served.actor.tokenizer, SCRIPT)
    threads = EnvThreads(1)
    try:
        record = served.loop.run_until_complete(run_episode(
            env_actor.sample_turn, threads, lambda: PythonToolEnv(tasks=[TASK]), TASK,
            played.sampling["seed"], tokenizer=env_actor.tokenizer, context_budget=4096))
    finally:
        threads.shutdown()
    looped = record.to_trajectory("g", played.sampling)

    assert played.end_reason == looped.end_reason == END_TERMINATED
    assert played.num_turns == looped.num_turns == len(SCRIPT)
    assert played.reward == looped.reward == 1.0
    assert played.token_ids == looped.token_ids
    assert played.loss_mask == looped.loss_mask
    assert played.behavior_logprobs == looped.behavior_logprobs
    # The env counts the calls it ran; the endpoint, which does not know the agent's tools,
    # every well-formed call the model wrote, the one with a wrong argument name included.
    assert (tool_calls(looped), tool_calls(played)) == (2, 3)
    text = served.actor.tokenizer.decode(played.token_ids)
    prompt_end = text.index("What is 169 - 85?")
    assert "\n84" in text, f"the interpreter's output is missing: {text[prompt_end:]}"
    assert "No tool call found" in text, f"the env's feedback is missing: {text[prompt_end:]}"
