"""`agent-rl eval` with an agent of one's own: examples/word_count_agent.py, written against the
`openai` package only, plays WordCount's held-out tasks through the OpenAI-compatible endpoint
and, greedy on the tiny model, gives token for token the env loop's episodes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agent_rl.evaluate.report import TRANSCRIPTS_FILE
from agent_rl.evaluate.runner import EvalError, evaluate

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

ROOT = Path(__file__).resolve().parents[2]
ENV_ID = "agent_rl/WordCount-v0"
OPTIONS: dict[str, Any] = {"env_id": ENV_ID, "split": "heldout", "k": 1,
                           "limit_per_category": 2, "max_tokens_per_turn": 8,
                           "context_budget": 2048, "kv_cache_gib": 0.25}


def transcripts(out_dir: Path) -> list[tuple[str, list[dict[str, str]], float]]:
    records = [json.loads(line) for line in (out_dir / TRANSCRIPTS_FILE).read_text().splitlines()]
    return sorted((r["task_id"], r["transcript"], r["reward"]) for r in records)


@pytest.mark.slow
def test_the_example_agent_plays_the_env_loops_episodes_token_for_token(
        tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    env_report = evaluate(tiny_model, out_dir=tmp_path / "env", **OPTIONS)
    agent_report = evaluate(tiny_model, out_dir=tmp_path / "agent",
                            agent="examples.word_count_agent:run", **OPTIONS)

    assert agent_report.settings["agent"] == "examples.word_count_agent:run"
    assert agent_report.num_episodes == env_report.num_episodes == 2
    assert "env_error" not in agent_report.settings["end_reasons"]
    played = transcripts(tmp_path / "agent")
    assert played == transcripts(tmp_path / "env")
    assert all(sum(segment["source"] == "model" for segment in transcript) > 1
               for _, transcript, _ in played), "episodes of several turns"
    assert agent_report.micro_pass_at_1 == env_report.micro_pass_at_1


def test_a_wrong_agent_spec_fails_before_any_engine_starts(tiny_model: Path) -> None:
    with pytest.raises(EvalError, match="cannot import"):
        evaluate(tiny_model, agent="no_such_agent_module:run", **OPTIONS)
