"""A complete new tool environment: a dataset, one typed tool and a reward function.

Everything else (prompt, tool-call parsing, the `answer` tool, budgets, spaces) is ToolEnv's
default. It is registered as `agent_rl/WordCount-v0` in `envs/registration.py` with

    register(id="agent_rl/WordCount-v0", entry_point="envs.examples.word_count_env:load_environment")

and created with `gymnasium.make("agent_rl/WordCount-v0", max_turns=4)`.
"""

from __future__ import annotations

import random
from typing import Any

import datasets

from envs.tool_env import ToolEnv
from envs.verifiers import Verdict, parse_number

WORDS = "the quick brown fox jumps over a lazy dog while seven small owls sing".split()


def count_words(text: str) -> int:
    """Count the words in a text, splitting on whitespace.

    Args:
        text: The text whose words to count.

    Returns:
        The number of words.
    """
    return len(text.split())


def word_count_reward(answer: str, task: dict[str, Any]) -> Verdict:
    """1 for the right count; 0.1 for being off by one, so near misses still teach something."""
    seen, expected = parse_number(answer), int(task["answer"])
    if seen == expected:
        return Verdict(1.0, True, "right count")
    near = seen is not None and abs(seen - expected) == 1
    return Verdict(0.1 if near else 0.0, False, f"expected {expected}, got {answer!r}")


def make_dataset(size: int = 50, seed: int = 0) -> datasets.Dataset:
    rng = random.Random(seed)
    rows = []
    for index in range(size):
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 15)))
        rows.append({
            "task_id": f"words-{index}",
            "prompt": f"How many words are in this sentence?\n\n{sentence}",
            "answer": str(len(sentence.split())),
        })
    return datasets.Dataset.from_list(rows)


def load_environment(split: str = "train", size: int = 50, seed: int = 0,
                     **kwargs: Any) -> ToolEnv:
    """The env factory Gymnasium's entry point calls: the first 80% of the tasks train, the rest
    are held out. kwargs go to ToolEnv (max_turns, ...)."""
    tasks = make_dataset(size, seed)
    cut = int(0.8 * size)
    tasks = tasks.select(range(cut) if split == "train" else range(cut, size))
    return ToolEnv(tasks, tools=[count_words], reward_fn=word_count_reward, **kwargs)
