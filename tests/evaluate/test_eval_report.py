"""Building, writing, reading and comparing evaluation reports (no engine needed)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from agent_rl.evaluate.report import (
    EpisodeResult,
    ReportFormatError,
    build_report,
    compare,
    load_report,
    report_markdown,
    report_table,
    write_report,
)
from agent_rl.evaluate.same_episodes import same_episodes


def _episode(
    task_id: str, category: str, sample: int, reward: float, turns: int = 2
) -> EpisodeResult:
    return EpisodeResult(
        task_id=task_id,
        category=category,
        sample_index=sample,
        reward=reward,
        num_turns=turns,
        num_tool_calls=turns - 1,
        num_model_tokens=10 * turns,
        num_tokens=100 + 10 * turns,
        end_reason="answered",
        transcript=[{"source": "env", "text": "prompt"}, {"source": "model", "text": "reply"}],
    )


def _unbalanced_episodes() -> list[EpisodeResult]:
    """'arith': 6 tasks x 2 samples, all solved; 'logic': 2 tasks x 2 samples, 1 of 4 solved."""
    episodes = [
        _episode(f"arith-{task}", "arith", sample, 1.0) for task in range(6) for sample in range(2)
    ]
    episodes += [
        _episode("logic-0", "logic", 0, 1.0, turns=4),
        _episode("logic-0", "logic", 1, 0.5, turns=4),
        _episode("logic-1", "logic", 0, 0.0, turns=4),
        _episode("logic-1", "logic", 1, 0.0, turns=4),
    ]
    return episodes


def _report(episodes: list[EpisodeResult], model: str = "ckpt-a", k: int = 2):
    return build_report(episodes, model=model, env_id="agent_rl/PythonTool-v0",
                        tasks_source="env", split="heldout", k=k, temperature=1.0)


def test_macro_pass_at_1_weighs_categories_equally_and_micro_weighs_episodes():
    report = _report(_unbalanced_episodes())
    by_name = {c.category: c for c in report.categories}
    assert by_name["arith"].pass_at_1 == 1.0
    assert by_name["logic"].pass_at_1 == pytest.approx(0.25), "reward 0.5 is not a pass"
    assert report.macro_pass_at_1 == pytest.approx((1.0 + 0.25) / 2)
    assert report.micro_pass_at_1 == pytest.approx(13 / 16)


def test_report_counts_tasks_episodes_and_pass_at_k():
    report = _report(_unbalanced_episodes())
    assert (report.num_tasks, report.num_episodes) == (8, 16)
    logic = next(c for c in report.categories if c.category == "logic")
    assert (logic.num_tasks, logic.num_episodes) == (2, 4)
    assert logic.pass_at_k == pytest.approx((1.0 + 0.0) / 2)  # pass@2: logic-0 yes, logic-1 no
    assert report.macro_pass_at_k == pytest.approx((1.0 + 0.5) / 2)
    assert logic.mean_turns == 4 and logic.mean_tool_calls == 3
    assert report.mean_turns == pytest.approx((12 * 2 + 4 * 4) / 16)
    assert [t.task_id for t in report.tasks][:2] == ["arith-0", "arith-1"]


def test_report_refuses_tasks_with_fewer_samples_than_k():
    with pytest.raises(ValueError, match="fewer than k=4"):
        _report(_unbalanced_episodes(), k=4)


def test_report_round_trips_through_json_and_writes_all_formats(tmp_path: Path):
    episodes = _unbalanced_episodes()
    report = _report(episodes)
    paths = write_report(report, episodes, tmp_path)
    assert load_report(tmp_path) == report
    assert load_report(paths["json"]) == report
    lines = paths["transcripts"].read_text().splitlines()
    assert len(lines) == len(episodes)
    first = json.loads(lines[0])
    assert first["success"] is True and first["transcript"][1] == {"source": "model",
                                                                     "text": "reply"}
    markdown = paths["markdown"].read_text()
    assert markdown == report_markdown(report)
    assert "| logic | 2 | 4 | 25.0% | 50.0% |" in markdown
    assert "**Macro pass@1: 62.5%**" in markdown


def test_report_table_renders_every_category_and_the_macro_row():
    console = Console(record=True, width=160)
    console.print(report_table(_report(_unbalanced_episodes())))
    text = console.export_text()
    for needle in ("arith", "logic", "macro", "micro", "62.5%", "81.2%", "pass@2"):
        assert needle in text


def test_load_report_rejects_files_that_are_not_reports(tmp_path: Path):
    (tmp_path / "bad.json").write_text(json.dumps({"format_version": 1, "model": "x"}))
    with pytest.raises(ReportFormatError):
        load_report(tmp_path / "bad.json")
    (tmp_path / "old.json").write_text(json.dumps({"format_version": 0}))
    with pytest.raises(ReportFormatError, match="format_version"):
        load_report(tmp_path / "old.json")
    with pytest.raises(FileNotFoundError):
        load_report(tmp_path / "missing")


def test_compare_reports_the_macro_difference_with_a_ci_around_it():
    better = _report(_unbalanced_episodes(), model="ckpt-b")
    worse_episodes = [
        _episode(e.task_id, e.category, e.sample_index, 0.0 if e.category == "arith" else e.reward)
        for e in _unbalanced_episodes()
    ]
    worse = _report(worse_episodes, model="ckpt-a")
    comparison = compare({"ckpt-a": worse, "ckpt-b": better}, seed=7, num_resamples=300)
    assert comparison.difference.estimate == pytest.approx(
        better.macro_pass_at_1 - worse.macro_pass_at_1
    )
    # Every arith task moved from 0 to 1, so every resample sees the same +0.5 in that category.
    assert comparison.difference.low <= comparison.difference.estimate <= comparison.difference.high
    assert comparison.difference.low >= 0.5 - 0.25
    again = compare({"ckpt-a": worse, "ckpt-b": better}, seed=7, num_resamples=300)
    assert again.difference == comparison.difference
    markdown = comparison.markdown()
    assert "+50.0 points" in markdown and "ckpt-b - ckpt-a" in markdown
    assert "| pass@1 arith | 0.0% | 100.0% | +100.0 |" in markdown
    console = Console(record=True, width=160)
    console.print(comparison.table())
    assert "macro pass@1" in console.export_text()


def test_a_comparison_shows_each_model_and_the_last_ones_gain_with_its_ci(tmp_path: Path):
    """The main job's base / SFT / RL table: pass@1, tool use and the CI of RL - SFT."""
    from dataclasses import replace

    def model(reward_of: dict[str, float], tool: bool) -> object:
        return _report([replace(e, reward=reward_of[e.category], used_tool=tool,
                                answered=tool) for e in _unbalanced_episodes()])

    reports = {"base": model({"arith": 0.0, "logic": 0.0}, tool=False),
               "sft": model({"arith": 0.0, "logic": 1.0}, tool=True),
               "rl": model({"arith": 1.0, "logic": 1.0}, tool=True)}
    table = compare(reports, num_resamples=300)
    data = table.to_json()
    assert data["models"]["base"]["macro_pass@1"] == 0.0
    assert data["models"]["rl"]["macro_pass@1"] == 1.0
    assert data["models"]["sft"]["tool_use_rate"] == 1.0
    assert data["models"]["rl"]["answer_success_rate"] == 1.0
    assert data["rl_minus_sft"]["points"] == pytest.approx(50.0)
    assert data["rl_minus_sft"]["ci95"] == pytest.approx([50.0, 50.0])
    markdown = table.markdown()
    assert "| macro pass@1 | 0.0% | 50.0% | 100.0% | +50.0 [+50.0, +50.0] |" in markdown
    assert "rl - sft: +50.0 points" in markdown
    with pytest.raises(ValueError, match="at least two"):
        compare({"rl": reports["rl"]})


def test_compare_refuses_reports_of_different_task_sets():
    report = _report(_unbalanced_episodes())
    fewer = _report([e for e in _unbalanced_episodes() if e.task_id != "arith-5"])
    with pytest.raises(ValueError, match="different tasks"):
        compare({"all": report, "fewer": fewer})


def test_report_metrics_are_namespaced_scalars_for_the_run_log():
    metrics = _report(_unbalanced_episodes()).metrics()
    assert metrics["eval/macro_pass_at_1"] == pytest.approx(0.625)
    assert metrics["eval/micro_pass_at_1"] == pytest.approx(13 / 16)
    assert metrics["eval/macro_pass_at_2"] == pytest.approx(0.75)
    assert metrics["eval/pass_at_1/logic"] == pytest.approx(0.25)
    assert all(isinstance(value, float) for value in metrics.values())


def test_a_report_says_how_many_episodes_lost_their_interpreter(tmp_path: Path):
    episodes = _unbalanced_episodes()
    assert _report(episodes).interpreter_death_rate == 0.0
    assert "interpreter died" not in report_markdown(_report(episodes))
    episodes[0].interpreter_deaths = 2
    episodes[1].interpreter_deaths = 1
    report = _report(episodes)
    assert report.interpreter_death_rate == 2 / len(episodes)
    write_report(report, episodes, tmp_path)
    assert load_report(tmp_path).interpreter_death_rate == report.interpreter_death_rate
    assert "the tool interpreter died in 12.5% of episodes" in report_markdown(report)


def test_same_episodes_counts_identical_transcripts_and_names_the_first_difference(
        tmp_path: Path):
    episodes = _unbalanced_episodes()
    write_report(_report(episodes), episodes, tmp_path / "env")
    other = [replace(episode, num_tool_calls=episode.num_tool_calls + 1) for episode in episodes]
    other[3] = replace(other[3], transcript=[{"source": "model", "text": "another reply"}])
    write_report(_report(other, model="agent"), other[:-1], tmp_path / "agent")

    match = same_episodes(tmp_path / "env", tmp_path / "agent" / "report.json")

    # Tool-call counts differ by definition between the paths and are not compared.
    assert (match.identical, match.shared, match.only_in_one) == (14, 15, 1)
    assert match.differing == ["arith-1#1: transcript"]
    assert "14/15" in match.line("env", "agent")


def test_same_episodes_needs_the_transcripts_file(tmp_path: Path):
    episodes = _unbalanced_episodes()
    write_report(_report(episodes), episodes, tmp_path / "a")
    (tmp_path / "a" / "transcripts.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="transcripts.jsonl"):
        same_episodes(tmp_path / "a", tmp_path / "a")
