"""Task sets as `datasets.Dataset`s: the shipped categories, or a user's JSONL/parquet file.

Columns: `task_id`, `category`, `prompt`, `answer`, `verifier` (`exact`, `numeric`, `yes_no` or
`unit_tests`) and `extra` (a JSON string, e.g. the unit tests of a code task).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets

from envs.errors import EnvsError

__all__ = [
    "CATEGORIES", "SPLITS", "TaskFileError", "load_tasks", "normalize_task", "split_sizes",
]

DATA_DIR = Path(__file__).parent / "data"
CATEGORIES = ("arithmetic", "strings", "lists", "dates", "code")
SPLITS = ("train", "heldout")
REQUIRED_COLUMNS = ("prompt", "answer")


class TaskFileError(EnvsError, ValueError):
    """A task file is missing, unreadable or lacks a required column."""


def load_tasks(
    split: str = "train",
    categories: Sequence[str] | None = None,
    path: str | Path | None = None,
) -> datasets.Dataset:
    """Load tasks: the shipped `split` of `categories` (all by default), or the file at `path`.

    A user file is JSONL (`.jsonl`/`.json`) or parquet with at least `prompt` and `answer`;
    the other columns get defaults (`verifier` "exact", `category` "default").

    Raises:
        ValueError: an unknown split or category, naming the valid ones.
        TaskFileError: a bad user file.
    """
    if path is not None:
        return _load_user_file(Path(path))
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; the splits are {', '.join(SPLITS)}")
    chosen = list(categories) if categories else list(CATEGORIES)
    unknown = [category for category in chosen if category not in CATEGORIES]
    if unknown:
        raise ValueError(
            f"unknown task category {unknown[0]!r}; the categories are {', '.join(CATEGORIES)}"
        )
    rows = []
    for category in chosen:
        rows.extend(_read_jsonl(DATA_DIR / f"{category}_{split}.jsonl"))
    return datasets.Dataset.from_list(rows)


def split_sizes() -> dict[tuple[str, str], int]:
    """(category, split) -> number of shipped tasks, counted from the files."""
    sizes = {}
    for category in CATEGORIES:
        for split in SPLITS:
            with open(DATA_DIR / f"{category}_{split}.jsonl", encoding="utf-8") as file:
                sizes[(category, split)] = sum(1 for line in file if line.strip())
    return sizes


def _read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        raise TaskFileError(
            f"task file {path} does not exist; regenerate the shipped files with "
            "`python -m envs.tasks.generate`"
        )
    rows = []
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise TaskFileError(f"{path}:{number} is not valid JSON: {error}") from error
    return rows


def _load_user_file(path: Path) -> datasets.Dataset:
    if path.suffix == ".parquet":
        dataset = datasets.Dataset.from_parquet(str(path))
        _check_columns(path, dataset.column_names)
        return dataset.map(
            normalize_task, with_indices=True, remove_columns=dataset.column_names
        )
    if path.suffix in (".jsonl", ".json"):
        rows = _read_jsonl(path)
        _check_columns(path, sorted(set().union(*rows)) if rows else [])
        try:
            # Normalize before Arrow sees the rows: users mix ints and strings in one column.
            normalized = [normalize_task(row, index) for index, row in enumerate(rows)]
        except ValueError as error:
            raise TaskFileError(f"{path}: {error}") from error
        return datasets.Dataset.from_list(normalized)
    raise TaskFileError(f"cannot read tasks from {path}: use a .jsonl or .parquet file")


def _check_columns(path: Path, columns: list[str]) -> None:
    missing = [column for column in REQUIRED_COLUMNS if column not in columns]
    if missing:
        raise TaskFileError(
            f"{path} has no {missing[0]!r} column (columns: {columns}); "
            "each task needs a prompt and an answer"
        )


def normalize_task(row: Mapping[str, Any], index: int = 0) -> dict[str, Any]:
    """A task row with every column present: defaults fill what a user's dataset omits.

    Raises:
        ValueError: the row has no `prompt` or no `answer`.
    """
    missing = [column for column in REQUIRED_COLUMNS if column not in row]
    if missing:
        raise ValueError(
            f"task row {index} has no {missing[0]!r} column (columns: {sorted(row)}); every task "
            "needs a prompt and an answer"
        )
    extra = row.get("extra")
    return {
        "task_id": str(row.get("task_id") or f"task-{index}"),
        "category": str(row.get("category") or "default"),
        "prompt": str(row["prompt"]),
        "answer": str(row["answer"]),
        "verifier": str(row.get("verifier") or "exact"),
        "extra": extra if isinstance(extra, str) else json.dumps(extra or {}, sort_keys=True),
    }
