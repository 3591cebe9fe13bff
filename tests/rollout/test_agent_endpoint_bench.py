"""`agent-rl bench agent-endpoint` on the tiny model: both modes play the same greedy episodes
on one engine, and the result has the shape the docs' table is read from."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from agent_rl.benchmarks import agent_endpoint_bench

pytestmark = pytest.mark.slow


def test_bench_plays_the_same_episodes_in_both_modes(tiny_model: Path) -> None:
    result = agent_endpoint_bench.run(Console(file=io.StringIO()), str(tiny_model), episodes=2,
                                      runs=1, max_tokens_per_turn=16)
    assert result["same_ids"], "the agent must sample what the env loop samples"
    assert [(row["mode"], row["round"]) for row in result["rounds"]] == [
        ("env", 0), ("agent", 0), ("agent", 1), ("env", 1)]
    assert all(row["errors"] == 0 and row["sampled_tokens"] > 0 for row in result["rounds"])
    assert result["timed_errors"] == 0
    assert result["agent_over_env"] == pytest.approx(
        result["median_episodes_per_s"]["agent"] / result["median_episodes_per_s"]["env"])
