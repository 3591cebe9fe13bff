"""`agent-rl eval --compare A B` on two saved reports, through typer as the CLI registers it."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from agent_rl.cli.eval import eval_command
from agent_rl.evaluate.report import EpisodeResult, build_report, write_report
from agent_rl.evaluate.runner import COMPARE_FILE, EvalError


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("eval")(eval_command)

    @app.command("noop")
    def _noop() -> None:
        """A second command, so that typer keeps `eval` as a subcommand name."""

    return app


def _saved_report(out_dir: Path, model: str, rewards: dict[str, float]) -> Path:
    episodes = [
        EpisodeResult(task_id=task_id, category=task_id.split("-")[0], sample_index=0,
                      reward=reward, num_turns=1, num_tool_calls=1, num_model_tokens=5,
                      num_tokens=50, end_reason="terminated")
        for task_id, reward in rewards.items()
    ]
    report = build_report(episodes, model=model, env_id="agent_rl/PythonTool-v0",
                          tasks_source="env", split="heldout", k=1, temperature=0.0)
    return write_report(report, episodes, out_dir)["json"]


def test_compare_of_two_report_files_prints_and_writes_the_macro_difference(tmp_path: Path):
    tasks = ["math-0", "math-1", "math-2", "code-0"]
    report_a = _saved_report(tmp_path / "a", "step-100", dict.fromkeys(tasks, 1.0))
    _saved_report(tmp_path / "b", "step-0", {t: float(t == "math-0") for t in tasks})
    out = tmp_path / "cmp"
    # A as its report.json, B as the eval dir holding one: --compare takes either.
    result = CliRunner().invoke(
        _app(), ["eval", "--compare", str(report_a), str(tmp_path / "b"), "--out", str(out)],
        terminal_width=160,
    )
    assert result.exit_code == 0, result.output
    assert "macro pass@1" in result.output
    markdown = (out / COMPARE_FILE).read_text()
    # macro A = 1.0; macro B = mean(1/3, 0) = 1/6; B - A is -83.3 points.
    assert "-83.3 points" in markdown
    assert "| pass@1 code | 100.0% | 0.0% | -100.0 |" in markdown
    assert (out / "compare.json").exists()


def test_eval_without_a_model_or_a_comparison_says_what_to_give():
    result = CliRunner().invoke(_app(), ["eval"])
    assert isinstance(result.exception, EvalError)
    assert "--model" in str(result.exception)


def test_eval_help_lists_the_documented_options():
    result = CliRunner().invoke(_app(), ["eval", "--help"], terminal_width=200)
    assert result.exit_code == 0
    for option in ("--model", "--tasks", "--split", "--k", "--out", "--compare"):
        assert option in result.output


@pytest.mark.parametrize("bad", [["--k", "0"], ["--compare", "only-one"]])
def test_eval_rejects_bad_arguments(bad: list[str]):
    result = CliRunner().invoke(_app(), ["eval", *bad])
    assert result.exit_code == 2


def test_tasks_that_are_neither_an_env_nor_a_file_are_refused_before_any_engine_starts():
    result = CliRunner().invoke(_app(), ["eval", "--model", "tiny", "--tasks", "agent_rl/Nope-v0"])
    assert isinstance(result.exception, EvalError)
    assert "neither a registered env id" in str(result.exception)


def test_env_args_are_yaml_values_and_bad_ones_are_clear() -> None:
    from agent_rl.cli.eval import parse_env_args

    assert parse_env_args(["plain_text_answers=true", "categories=[dates, strings]"]) == {
        "plain_text_answers": True, "categories": ["dates", "strings"]}
    with pytest.raises(EvalError, match="not KEY=VALUE"):
        parse_env_args(["plain_text_answers"])
