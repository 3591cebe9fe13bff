"""`agent-rl env list|run` and the env-overhead benchmark."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from typer.testing import CliRunner

from agent_rl.benchmarks import env_bench
from agent_rl.cli.envs import app
from envs.tool_calls import format_tool_call

runner = CliRunner()


def test_list_shows_registered_envs_and_split_sizes():
    result = runner.invoke(app, ["list"], terminal_width=200)
    assert result.exit_code == 0, result.output
    for text in ("agent_rl/PythonTool-v0", "agent_rl/Desktop-v0", "arithmetic", "heldout"):
        assert text in result.output
    assert "200" in result.output and "50" in result.output


def test_run_with_the_oracle_policy_solves_the_task():
    result = runner.invoke(
        app, ["run", "agent_rl/PythonTool-v0", "--task", "0", "--split", "heldout"],
        terminal_width=200,
    )
    assert result.exit_code == 0, result.output
    assert "reward 1" in result.output and "terminated True" in result.output


def test_run_replays_a_script_file(tmp_path):
    script = tmp_path / "turns.txt"
    script.write_text("let me think\n---\n" + format_tool_call("answer", {"answer": "nope"}))
    result = runner.invoke(
        app, ["run", "agent_rl/PythonTool-v0", "--task", "1", "--policy", str(script)],
        terminal_width=200,
    )
    assert result.exit_code == 0, result.output
    assert "No tool call found" in result.output and "reward 0" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "agent_rl/PythonTol-v0"], "did you mean 'agent_rl/PythonTool-v0'"),
        (["run", "agent_rl/PythonTool-v0", "--policy", "gpt"], "unknown policy 'gpt'"),
        (["run", "agent_rl/PythonTool-v0", "--policy", "scripted"], "needs --script FILE"),
    ],
)
def test_run_reports_bad_arguments_in_one_line(args, message):
    result = runner.invoke(app, args, terminal_width=200)
    assert result.exit_code == 1
    assert message in result.output


def test_env_bench_reports_reset_and_step_overhead():
    rows = env_bench.run(Console(file=io.StringIO()), steps=20)
    operations = [row["operation"] for row in rows]
    assert operations == ["reset", "step, no tool call", "step, no-op tool call (excl. tool)"]
    assert all(row["count"] == 20 and row["p50_ms"] > 0 for row in rows)
