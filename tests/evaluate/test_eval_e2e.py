"""An evaluation of the tiny model on PythonTool's held-out split through vLLM and the real env."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agent_rl.evaluate.report import (
    MARKDOWN_FILE,
    REPORT_FILE,
    TRANSCRIPTS_FILE,
    EvalReport,
    compare,
    load_report,
)
from agent_rl.evaluate.runner import evaluate

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

pytestmark = pytest.mark.slow

CATEGORIES = {"arithmetic", "strings", "lists", "dates", "code"}
LIMIT_PER_CATEGORY = 2
MAX_TURNS = 2


@pytest.fixture(scope="module")
def eval_run(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[EvalReport, Path]:
    out_dir = tmp_path_factory.mktemp("eval")
    report = evaluate(
        tiny_model,
        split="heldout",
        k=1,
        limit_per_category=LIMIT_PER_CATEGORY,
        out_dir=out_dir,
        max_tokens_per_turn=16,
        max_turns=MAX_TURNS,
        context_budget=2048,
        kv_cache_gib=0.25,
    )
    return report, out_dir


def test_tiny_model_eval_reports_every_category_with_the_asked_counts(eval_run):
    report, _ = eval_run
    assert {c.category for c in report.categories} == CATEGORIES
    assert report.num_tasks == len(CATEGORIES) * LIMIT_PER_CATEGORY
    assert report.num_episodes == report.num_tasks  # k = 1
    assert "env_error" not in report.settings["end_reasons"], report.settings["end_reasons"]
    assert (report.k, report.temperature, report.split) == (1, 0.0, "heldout")
    for category in report.categories:
        assert (category.num_tasks, category.num_episodes) == (LIMIT_PER_CATEGORY,) * 2
        assert 0.0 <= category.pass_at_1 <= 1.0
        assert category.pass_at_k == category.pass_at_1  # pass@1 twice when k = 1
        assert 1 <= category.mean_turns <= MAX_TURNS
    assert 0.0 <= report.micro_pass_at_1 <= 1.0
    assert report.macro_pass_at_1 == pytest.approx(
        sum(c.pass_at_1 for c in report.categories) / len(CATEGORIES)
    )
    assert report.mean_model_tokens <= MAX_TURNS * 16
    assert report.mean_tokens > report.mean_model_tokens, "prompts are fed tokens"
    assert all(task.task_id.split("-")[0] == task.category for task in report.tasks)


def test_tiny_model_eval_writes_json_markdown_and_decoded_transcripts(eval_run):
    report, out_dir = eval_run
    assert load_report(out_dir / REPORT_FILE) == report
    assert "Macro pass@1" in (out_dir / MARKDOWN_FILE).read_text()
    records = [json.loads(line) for line in (out_dir / TRANSCRIPTS_FILE).read_text().splitlines()]
    assert len(records) == report.num_episodes
    for record in records:
        sources = [segment["source"] for segment in record["transcript"]]
        assert sources[0] == "env" and "model" in sources
        opening = record["transcript"][0]["text"]
        assert "python" in opening, "the system prompt names the python tool"
        assert record["success"] == (record["reward"] >= report.success_threshold)
        assert record["error"] is None
    arithmetic_prompts = [r["transcript"][0]["text"] for r in records if r["category"] == "arithmetic"]
    assert any("What is" in prompt for prompt in arithmetic_prompts)


def test_a_report_compared_with_itself_differs_by_exactly_zero(eval_run):
    report, _ = eval_run
    difference = compare({"a": report, "b": report}, num_resamples=200).difference
    assert (difference.low, difference.estimate, difference.high) == (0.0, 0.0, 0.0)


def test_llama_checkpoints_are_scored_by_the_matched_model(tiny_model: Path, tmp_path: Path,
                                                           monkeypatch) -> None:
    # The stock vLLM Llama keeps a tied lm_head's old values after an in-place reload, so a
    # trained checkpoint must be scored by the matched model, and its base by the same kernels.
    from agent_rl.evaluate.runner import _engine_model_dir
    from kernels.vllm_plugin import ARCHITECTURE

    monkeypatch.setenv("AGENT_RL_HOME", str(tmp_path / "home"))
    engine_dir = _engine_model_dir(tiny_model)
    config = json.loads((engine_dir / "config.json").read_text())
    assert config["architectures"] == [ARCHITECTURE]
    other = tmp_path / tiny_model.name
    other.mkdir()
    (other / "config.json").write_text((tiny_model / "config.json").read_text())
    assert _engine_model_dir(other) != engine_dir, "same-named checkpoints must not share a dir"
