"""Desktop task sets in OSWorld's layout and JSON format.

`tasks/examples/<domain>/<id>.json` holds one task each, exactly as OSWorld's
`evaluation_examples/examples/` does; `tasks/train.json` and `tasks/heldout.json` are split files
in the format of OSWorld's `test_all.json` (`{"<domain>": ["<id>", ...]}`). A task from OSWorld's
own repository can be dropped in as is; `check_task` says which of its steps or evaluators this
env lacks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets

from envs.desktop.evaluate import (
    GETTERS,
    INFEASIBLE,
    METRICS,
    UnsupportedEvaluator,
    unsupported_evaluator_parts,
)
from envs.desktop.setup_steps import SUPPORTED_STEPS, UnsupportedTaskStep, unsupported_steps

__all__ = [
    "TASKS_DIR",
    "SPLITS",
    "TaskFormatError",
    "UnsupportedTaskParts",
    "check_task",
    "load_desktop_tasks",
    "load_task_file",
    "task_from_row",
    "task_to_row",
]

TASKS_DIR = Path(__file__).parent / "tasks"
SPLITS = ("train", "heldout")
_REQUIRED_KEYS = ("id", "instruction", "config", "evaluator")


class TaskFormatError(ValueError):
    """A task file or row is not an OSWorld task."""


class UnsupportedTaskParts(UnsupportedTaskStep, UnsupportedEvaluator):
    """A task uses set-up steps, getters or metrics this env lacks; the message lists them all,
    so one run of `check_task` says everything a task would need."""


def check_task(task: dict[str, Any]) -> None:
    """Raise if the task misses a key, or uses set-up steps, getters or metrics we lack (all of
    them named in one `UnsupportedTaskParts`)."""
    if not isinstance(task, dict):
        raise TaskFormatError(f"a task must be a JSON object, got {type(task).__name__}")
    missing = [key for key in _REQUIRED_KEYS if key not in task]
    if missing:
        raise TaskFormatError(
            f"task {task.get('id', '?')!r} lacks {', '.join(missing)}; an OSWorld task has "
            f"{', '.join(_REQUIRED_KEYS)}"
        )
    problems = [
        *unsupported_steps(task["config"], "config"),
        *unsupported_steps(task["evaluator"].get("postconfig", []), "evaluator.postconfig"),
        *unsupported_evaluator_parts(task["evaluator"]),
    ]
    if problems:
        raise UnsupportedTaskParts(
            f"task {task['id']!r} needs what this env lacks: {'; '.join(problems)} (supported "
            f"steps: {', '.join(SUPPORTED_STEPS)}; funcs: {', '.join([*METRICS, INFEASIBLE])}; "
            f"getters: {', '.join(GETTERS)})"
        )


def load_task_file(path: str | Path) -> dict[str, Any]:
    """Read and check one OSWorld task JSON file."""
    task = json.loads(Path(path).read_text())
    check_task(task)
    return task


def _domain(task: dict[str, Any]) -> str:
    apps = task.get("related_apps") or [task.get("snapshot", "os")]
    return str(apps[0])


def task_to_row(task: dict[str, Any]) -> dict[str, str]:
    """A task as a row of the project's task-set columns (the full task goes in `extra`)."""
    return {
        "task_id": task["id"],
        "category": _domain(task),
        "prompt": task["instruction"],
        "answer": "",
        "verifier": "osworld_evaluator",
        "extra": json.dumps(task),
    }


def task_from_row(row: dict[str, Any]) -> dict[str, Any]:
    """The OSWorld task inside a task-set row, or the row itself if it is already a task."""
    if "evaluator" in row and "instruction" in row:
        task = dict(row)
    elif isinstance(row.get("extra"), str):
        task = json.loads(row["extra"])
    else:
        raise TaskFormatError(
            "options['task'] must be an OSWorld task dict or a row of load_desktop_tasks(); "
            f"got keys {sorted(row)}"
        )
    check_task(task)
    return task


def load_desktop_tasks(
    split: str = "train", categories: list[str] | None = None, tasks_dir: Path = TASKS_DIR
) -> datasets.Dataset:
    """The tasks of a split as a Dataset with columns task_id, category, prompt, answer,
    verifier, extra (the OSWorld task JSON). `categories` keeps only those domains."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; the desktop task splits are {SPLITS}")
    meta = json.loads((tasks_dir / f"{split}.json").read_text())
    rows = []
    for domain, task_ids in sorted(meta.items()):
        if categories is not None and domain not in categories:
            continue
        for task_id in task_ids:
            task = load_task_file(tasks_dir / "examples" / domain / f"{task_id}.json")
            rows.append(task_to_row(task) | {"category": domain})
    if not rows:
        raise ValueError(f"split {split!r} has no tasks in categories {categories}")
    return datasets.Dataset.from_list(rows)
