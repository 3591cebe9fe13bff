"""The evaluation report: per-episode results in, per-category pass@k out, in four formats.

`build_report` is pure (episodes -> `EvalReport`), so the statistics can be checked without an
engine. The report renders as a rich table for the terminal, JSON (the format `compare` reads
back), Markdown, and the episodes' transcripts as JSONL.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from agent_rl.errors import UserError
from agent_rl.evaluate.passk import (
    SUCCESS_THRESHOLD,
    BootstrapInterval,
    is_success,
    macro_mean,
    mean,
    micro_mean,
    paired_macro_difference_ci,
    pass_at_k,
)

REPORT_FILE = "report.json"
MARKDOWN_FILE = "report.md"
TRANSCRIPTS_FILE = "transcripts.jsonl"
REPORT_FORMAT_VERSION = 1


class ReportFormatError(UserError, ValueError):
    """A file given as an evaluation report is not one this version can read."""


@dataclass
class EpisodeResult:
    """One sampled episode of one task, reduced to what the report needs.

    `transcript` is the decoded conversation as segments [{"source": "model"|"env", "text"}];
    it goes to the transcripts file, not into the report JSON.
    """

    task_id: str
    category: str
    sample_index: int
    reward: float
    num_turns: int
    num_tool_calls: int
    num_model_tokens: int
    num_tokens: int
    end_reason: str
    transcript: list[dict[str, str]] = field(default_factory=list)
    used_tool: bool = False  # at least one well-formed call of a tool other than `answer`
    answered: bool = False  # the episode ended with the model's final answer (terminated)
    success_threshold: float = SUCCESS_THRESHOLD
    error: str | None = None
    interpreter_deaths: int = 0  # the env's tool interpreter died under the episode

    @property
    def success(self) -> bool:
        return is_success(self.reward, self.success_threshold)


@dataclass
class TaskResult:
    """All samples of one task: the unit of the bootstrap in `compare`."""

    task_id: str
    category: str
    num_samples: int
    num_correct: int
    pass_at_1: float
    pass_at_k: float
    mean_reward: float


@dataclass
class CategoryResult:
    """One task category; pass@1 and pass@k are means over its tasks."""

    category: str
    num_tasks: int
    num_episodes: int
    pass_at_1: float
    pass_at_k: float
    mean_reward: float
    mean_turns: float
    mean_tool_calls: float
    mean_model_tokens: float
    mean_tokens: float
    tool_use_rate: float = 0.0  # share of episodes that called a tool other than `answer`
    answer_success_rate: float = 0.0  # share of episodes ending in a correct final answer


@dataclass
class EvalReport:
    """The outcome of one evaluation run, as stored in report.json.

    `macro_pass_at_1` averages the categories' pass@1 (each category weighs the same, the figure
    to track); `micro_pass_at_1` averages all episodes (large categories weigh more). An episode
    passes when its reward >= `success_threshold`.
    """

    model: str
    env_id: str
    tasks_source: str
    split: str
    k: int
    temperature: float
    success_threshold: float
    macro_pass_at_1: float
    micro_pass_at_1: float
    macro_pass_at_k: float
    num_tasks: int
    num_episodes: int
    mean_turns: float
    mean_tool_calls: float
    mean_model_tokens: float
    mean_tokens: float
    categories: list[CategoryResult]
    tasks: list[TaskResult]
    settings: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    format_version: int = REPORT_FORMAT_VERSION
    tool_use_rate: float = 0.0
    answer_success_rate: float = 0.0
    # Share of episodes whose tool interpreter died at least once: the model's code or the
    # sandbox; a score with many of these is the sandbox's as much as the model's.
    interpreter_death_rate: float = 0.0

    def task_pass_at_1(self) -> dict[str, dict[str, float]]:
        """pass@1 per task, grouped by category: the input of the paired bootstrap."""
        grouped: dict[str, dict[str, float]] = defaultdict(dict)
        for task in self.tasks:
            grouped[task.category][task.task_id] = task.pass_at_1
        return dict(grouped)

    def metrics(self, prefix: str = "eval") -> dict[str, float]:
        """Scalars for a run's metrics log: `eval/macro_pass_at_1`, `eval/pass_at_1/<category>`."""
        scalars = {
            f"{prefix}/macro_pass_at_1": self.macro_pass_at_1,
            f"{prefix}/micro_pass_at_1": self.micro_pass_at_1,
            f"{prefix}/macro_pass_at_{self.k}": self.macro_pass_at_k,
            f"{prefix}/mean_turns": self.mean_turns,
            f"{prefix}/mean_tool_calls": self.mean_tool_calls,
            f"{prefix}/mean_model_tokens": self.mean_model_tokens,
        }
        for category in self.categories:
            scalars[f"{prefix}/pass_at_1/{category.category}"] = category.pass_at_1
        return scalars

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalReport:
        version = data.get("format_version")
        if version != REPORT_FORMAT_VERSION:
            raise ReportFormatError(
                f"report format_version is {version!r}, this agent-rl reads "
                f"{REPORT_FORMAT_VERSION}; re-run the evaluation to regenerate it"
            )
        fields = dict(data)
        fields["categories"] = [CategoryResult(**c) for c in data["categories"]]
        fields["tasks"] = [TaskResult(**t) for t in data["tasks"]]
        return cls(**fields)


def build_report(
    episodes: Sequence[EpisodeResult],
    *,
    model: str,
    env_id: str,
    tasks_source: str,
    split: str,
    k: int,
    temperature: float,
    settings: dict[str, Any] | None = None,
    wall_s: float = 0.0,
) -> EvalReport:
    """Aggregate episodes into per-task, per-category and overall figures.

    Raises:
        ValueError: there are no episodes, or a task has fewer than k samples.
    """
    if not episodes:
        raise ValueError("no episodes to report on: the task set was empty after filtering")
    thresholds = {episode.success_threshold for episode in episodes}
    if len(thresholds) != 1:
        raise ValueError(f"episodes were judged with different success thresholds: {thresholds}")
    by_task: dict[str, list[EpisodeResult]] = defaultdict(list)
    for episode in episodes:
        by_task[episode.task_id].append(episode)
    tasks = [_task_result(task_episodes, k) for task_episodes in by_task.values()]
    tasks.sort(key=lambda task: (task.category, task.task_id))

    by_category: dict[str, list[EpisodeResult]] = defaultdict(list)
    for episode in episodes:
        by_category[episode.category].append(episode)
    categories = [
        _category_result(name, by_category[name], [t for t in tasks if t.category == name])
        for name in sorted(by_category)
    ]
    pass_at_1 = {c: [t.pass_at_1 for t in tasks if t.category == c] for c in by_category}
    pass_at_k_by_category = {
        c: [t.pass_at_k for t in tasks if t.category == c] for c in by_category
    }
    successes = {c: [float(e.success) for e in by_category[c]] for c in by_category}
    return EvalReport(
        model=model,
        env_id=env_id,
        tasks_source=tasks_source,
        split=split,
        k=k,
        temperature=temperature,
        success_threshold=thresholds.pop(),
        macro_pass_at_1=macro_mean(pass_at_1),
        micro_pass_at_1=micro_mean(successes),
        macro_pass_at_k=macro_mean(pass_at_k_by_category),
        num_tasks=len(tasks),
        num_episodes=len(episodes),
        mean_turns=mean([e.num_turns for e in episodes]),
        mean_tool_calls=mean([e.num_tool_calls for e in episodes]),
        mean_model_tokens=mean([e.num_model_tokens for e in episodes]),
        mean_tokens=mean([e.num_tokens for e in episodes]),
        categories=categories,
        tasks=tasks,
        settings=dict(settings or {}),
        wall_s=wall_s,
        tool_use_rate=mean([float(e.used_tool) for e in episodes]),
        answer_success_rate=mean([float(e.answered and e.success) for e in episodes]),
        interpreter_death_rate=mean([float(e.interpreter_deaths > 0) for e in episodes]),
    )


def _task_result(episodes: Sequence[EpisodeResult], k: int) -> TaskResult:
    first = episodes[0]
    num_correct = sum(episode.success for episode in episodes)
    if len(episodes) < k:
        raise ValueError(
            f"task {first.task_id!r} has {len(episodes)} samples, fewer than k={k}; "
            "pass@k needs at least k samples per task"
        )
    return TaskResult(
        task_id=first.task_id,
        category=first.category,
        num_samples=len(episodes),
        num_correct=num_correct,
        pass_at_1=num_correct / len(episodes),
        pass_at_k=pass_at_k(len(episodes), num_correct, k),
        mean_reward=mean([episode.reward for episode in episodes]),
    )


def _category_result(
    name: str, episodes: Sequence[EpisodeResult], tasks: Sequence[TaskResult]
) -> CategoryResult:
    return CategoryResult(
        category=name,
        num_tasks=len(tasks),
        num_episodes=len(episodes),
        pass_at_1=mean([task.pass_at_1 for task in tasks]),
        pass_at_k=mean([task.pass_at_k for task in tasks]),
        mean_reward=mean([episode.reward for episode in episodes]),
        mean_turns=mean([episode.num_turns for episode in episodes]),
        mean_tool_calls=mean([episode.num_tool_calls for episode in episodes]),
        mean_model_tokens=mean([episode.num_model_tokens for episode in episodes]),
        mean_tokens=mean([episode.num_tokens for episode in episodes]),
        tool_use_rate=mean([float(episode.used_tool) for episode in episodes]),
        answer_success_rate=mean([float(e.answered and e.success) for e in episodes]),
    )


def _percent(value: float) -> str:
    return f"{100.0 * value:.1f}%"


def _signed_percent(value: float) -> str:
    return f"{100.0 * value:+.1f}"


def _report_rows(report: EvalReport) -> list[list[str]]:
    rows = [
        [
            c.category,
            str(c.num_tasks),
            str(c.num_episodes),
            _percent(c.pass_at_1),
            *([_percent(c.pass_at_k)] if report.k > 1 else []),
            f"{c.mean_turns:.2f}",
            f"{c.mean_tool_calls:.2f}",
            f"{c.mean_model_tokens:.0f}",
        ]
        for c in report.categories
    ]
    rows.append(
        [
            "macro",
            str(report.num_tasks),
            str(report.num_episodes),
            _percent(report.macro_pass_at_1),
            *([_percent(report.macro_pass_at_k)] if report.k > 1 else []),
            f"{report.mean_turns:.2f}",
            f"{report.mean_tool_calls:.2f}",
            f"{report.mean_model_tokens:.0f}",
        ]
    )
    micro = ["micro", "", "", _percent(report.micro_pass_at_1)]
    rows.append(micro + [""] * (len(rows[-1]) - len(micro)))
    return rows


def _report_headers(report: EvalReport) -> list[str]:
    """pass@k gets a column only when k > 1: for k = 1 it is pass@1 again."""
    pass_at_k = [f"pass@{report.k}"] if report.k > 1 else []
    return ["category", "tasks", "episodes", "pass@1", *pass_at_k, "turns", "tool calls",
            "model tokens"]


def report_table(report: EvalReport) -> Table:
    """The report as a rich table, one row per category plus the macro and micro rows."""
    table = Table(
        title=f"{report.model} on {report.env_id} ({report.split}), "
        f"k={report.k}, T={report.temperature:g}",
        caption=f"pass = reward >= {report.success_threshold:g}; macro = mean of categories, "
        "micro = mean of episodes",
    )
    headers = _report_headers(report)
    for index, header in enumerate(headers):
        table.add_column(header, justify="left" if index == 0 else "right")
    rows = _report_rows(report)
    for index, row in enumerate(rows):
        table.add_row(*row, end_section=index == len(rows) - 3)
    return table


def _markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(headers) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def report_markdown(report: EvalReport) -> str:
    """The report as a Markdown section: a settings line and the category table."""
    header = (
        f"## Evaluation of `{report.model}`\n\n"
        f"Env `{report.env_id}`, tasks `{report.tasks_source}` ({report.split}), "
        f"k={report.k}, temperature {report.temperature:g}, "
        f"{report.num_tasks} tasks, {report.num_episodes} episodes. "
        f"An episode passes when its reward >= {report.success_threshold:g}.\n\n"
        f"**Macro pass@1: {_percent(report.macro_pass_at_1)}** (mean of the categories' pass@1; "
        f"micro, the mean over episodes: {_percent(report.micro_pass_at_1)}).\n\n"
    )
    return (header + _markdown_table(_report_headers(report), _report_rows(report)) + "\n"
            + (f"\n{interpreter_death_warning(report)}\n" if report.interpreter_death_rate else ""))


def interpreter_death_warning(report: EvalReport) -> str:
    """Why a score may be the sandbox's: a died interpreter fails the episode either way."""
    return (f"Warning: the tool interpreter died in {_percent(report.interpreter_death_rate)} "
            "of episodes (the model's code or the sandbox; see the transcripts): those episodes "
            "count as failures.")


def write_report(
    report: EvalReport, episodes: Sequence[EpisodeResult], out_dir: Path
) -> dict[str, Path]:
    """Write report.json, report.md and transcripts.jsonl into out_dir; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out_dir / REPORT_FILE,
        "markdown": out_dir / MARKDOWN_FILE,
        "transcripts": out_dir / TRANSCRIPTS_FILE,
    }
    paths["json"].write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    paths["markdown"].write_text(report_markdown(report))
    with paths["transcripts"].open("w") as handle:
        for episode in episodes:
            record = asdict(episode)
            record["success"] = episode.success
            handle.write(json.dumps(record) + "\n")
    return paths


def load_report(path: Path) -> EvalReport:
    """Read a report.json (or a directory holding one).

    Raises:
        FileNotFoundError: no report at that path.
        ReportFormatError: the file is not an agent-rl evaluation report.
    """
    path = Path(path)
    if path.is_dir():
        path = path / REPORT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no evaluation report at {path}; run `agent-rl eval --out DIR`")
    try:
        data = json.loads(path.read_text())
        return EvalReport.from_dict(data)
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise ReportFormatError(f"{path} is not an agent-rl evaluation report: {error}") from error


@dataclass
class Comparison:
    """Models evaluated on the same tasks (base, SFT, RL; or two checkpoints), one column each,
    and the last one's gain over the one before it: per category, and for macro pass@1 with
    the paired bootstrap CI. `agent-rl compare` and `agent-rl eval --compare` both print one."""

    reports: dict[str, EvalReport]
    difference: BootstrapInterval

    @property
    def names(self) -> list[str]:
        return list(self.reports)

    def rows(self) -> list[list[str]]:
        reports = list(self.reports.values())
        categories = sorted({c.category for report in reports for c in report.categories})
        by_name = [{c.category: c for c in report.categories} for report in reports]
        rows = []
        for name in categories:
            cells = [_percent(cats[name].pass_at_1) if name in cats else "-" for cats in by_name]
            before, last = by_name[-2].get(name), by_name[-1].get(name)
            gain = _signed_percent(last.pass_at_1 - before.pass_at_1) if before and last else "-"
            rows.append([f"pass@1 {name}", *cells, gain])
        ci = self.difference
        rows.append(["macro pass@1", *(_percent(r.macro_pass_at_1) for r in reports),
                     f"{_signed_percent(ci.estimate)} "
                     f"[{_signed_percent(ci.low)}, {_signed_percent(ci.high)}]"])
        rows.append(["tool calls per episode", *(f"{r.mean_tool_calls:.2f}" for r in reports),
                     ""])
        rows.append(["episodes calling a tool", *(_percent(r.tool_use_rate) for r in reports), ""])
        rows.append(["episodes ending in a correct answer call",
                     *(_percent(r.answer_success_rate) for r in reports), ""])
        return rows

    def headers(self) -> list[str]:
        before, last = self.names[-2:]
        return ["", *self.names, f"{last} - {before} (pts)"]

    def difference_line(self) -> str:
        ci, (before, last) = self.difference, self.names[-2:]
        return (f"{last} - {before}: {_signed_percent(ci.estimate)} points macro pass@1, "
                f"{ci.confidence:.0%} CI [{_signed_percent(ci.low)}, {_signed_percent(ci.high)}] "
                f"(paired bootstrap over tasks within categories, {ci.num_resamples} resamples, "
                f"seed {ci.seed})")

    def table(self) -> Table:
        table = Table(*self.headers(), caption=self.difference_line())
        for row in self.rows():
            table.add_row(*row)
        return table

    def markdown(self) -> str:
        return (_markdown_table(self.headers(), self.rows()) + "\n\n" + self.difference_line()
                + ".\n")

    def to_json(self) -> dict[str, Any]:
        """`{"models": {name: {...}}, "<last>_minus_<before>": {"points", "ci95"}}`; pass@1 and
        rates as fractions, the difference in points."""
        before, last = self.names[-2:]
        ci = self.difference
        return {
            "models": {
                name: {
                    "macro_pass@1": report.macro_pass_at_1,
                    "tool_calls_per_episode": report.mean_tool_calls,
                    "tool_use_rate": report.tool_use_rate,
                    "answer_success_rate": report.answer_success_rate,
                    "pass@1": {c.category: c.pass_at_1 for c in report.categories},
                    "num_episodes": report.num_episodes,
                }
                for name, report in self.reports.items()
            },
            f"{last}_minus_{before}": {"points": 100 * ci.estimate,
                                       "ci95": [100 * ci.low, 100 * ci.high]},
        }


def compare(reports: dict[str, EvalReport], num_resamples: int = 2000, seed: int = 0
            ) -> Comparison:
    """Raises ValueError for fewer than two reports, or reports of different tasks (the
    bootstrap pairs tasks)."""
    if len(reports) < 2:
        raise ValueError("a comparison needs at least two reports")
    *_, before, last = reports.values()
    difference = paired_macro_difference_ci(last.task_pass_at_1(), before.task_pass_at_1(),
                                            num_resamples=num_resamples, seed=seed)
    return Comparison(reports=dict(reports), difference=difference)
