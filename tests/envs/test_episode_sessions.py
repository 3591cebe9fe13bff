"""Many Python-tool episodes in flight on few env threads: each episode holds its sandbox
session from its first python call to its end, so the pool must hand out one per episode.
A fixed pool of 4 deadlocked `agent-rl eval --concurrency 64`: every env thread waited for a
session while the episodes holding one waited for a thread."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from agent_rl.rollout.episode import EnvThreads, SampledTurn, SampleTurn, run_episode
from envs.loading import make_env
from envs.tasks import load_tasks

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None,
                                reason="bubblewrap (bwrap) is not installed: no sandbox to hold")


def _call(name: str, arguments: dict) -> str:
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


@pytest.mark.timeout(300)
def test_more_episodes_than_threads_and_warm_sessions_all_finish(tiny_model: Path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    tasks = load_tasks("heldout", ["arithmetic"]).to_list()[:24]
    env_threads = EnvThreads(8)

    def policy(task: dict) -> SampleTurn:
        turns = [_call("python", {"code": "x = 6 * 7\nprint(x)"}),
                 _call("answer", {"answer": task["answer"]})]

        async def sample_turn(token_ids: list[int], room: int, seed: int | None) -> SampledTurn:
            await asyncio.sleep(0.05)  # decoding: the episode holds its session meanwhile
            ids = [*tokenizer.encode(turns.pop(0), add_special_tokens=False), stop]
            return SampledTurn(ids, [0.0] * len(ids), [0] * len(ids), "stop", stop)

        return sample_turn

    async def run_all() -> list:
        episodes = [run_episode(policy(task), env_threads,
                                lambda: make_env("agent_rl/PythonTool-v0", split="heldout"),
                                task, seed=0, tokenizer=tokenizer, context_budget=2048)
                    for task in tasks]
        return await asyncio.wait_for(asyncio.gather(*episodes), timeout=120)

    try:
        records = asyncio.run(run_all())
    finally:
        env_threads.shutdown()
    assert [record.end_reason for record in records] == ["terminated"] * len(tasks)
    assert all(record.reward == 1.0 for record in records)
