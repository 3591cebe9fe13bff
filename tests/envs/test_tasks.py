"""The shipped task sets: reproducible, disjoint splits, right sizes, answers that check out."""

from __future__ import annotations

import contextlib
import io
import json
import re

import datasets
import pytest

from envs.tasks import CATEGORIES, DATA_DIR, SPLITS, TaskFileError, load_tasks, split_sizes
from envs.tasks.generate import generate_files, split_of
from envs.verifiers import as_verdict, default_verifiers

COLUMNS = ["answer", "category", "extra", "prompt", "task_id", "verifier"]


@pytest.fixture(scope="module")
def all_tasks() -> dict[str, datasets.Dataset]:
    return {split: load_tasks(split) for split in SPLITS}


def test_generator_reproduces_the_shipped_files_bit_for_bit():
    files = generate_files(seed=0)
    assert sorted(files) == sorted(path.name for path in DATA_DIR.glob("*.jsonl"))
    for name, text in files.items():
        assert (DATA_DIR / name).read_bytes() == text.encode("utf-8"), name


def test_train_and_heldout_are_disjoint_and_split_by_prompt_hash(all_tasks):
    train, heldout = all_tasks["train"], all_tasks["heldout"]
    assert not set(train["prompt"]) & set(heldout["prompt"])
    assert not set(train["task_id"]) & set(heldout["task_id"])
    assert all(split_of(prompt) == "train" for prompt in train["prompt"])
    assert all(split_of(prompt) == "heldout" for prompt in heldout["prompt"])


def test_each_category_has_200_train_and_50_heldout_tasks():
    assert split_sizes() == {
        (category, split): {"train": 200, "heldout": 50}[split]
        for category in CATEGORIES for split in SPLITS
    }


@pytest.mark.parametrize("category", [c for c in CATEGORIES if c != "code"])
def test_no_constant_answer_passes_a_category_beyond_chance(category):
    """A policy that ignores the question must not score: the best constant answer (any
    reference answer, yes, no, a small number) passes at most 10% of the held-out tasks, and
    yes/no questions are balanced. Code tasks are exempt: each needs its own function."""
    tasks = load_tasks("heldout", categories=[category]).to_list()
    verifiers = default_verifiers()
    candidates = {task["answer"] for task in tasks} | {"yes", "no", "0", "1", "2", "Monday"}
    best = max(
        sum(as_verdict(verifiers[task["verifier"]](answer, task)).reward for task in tasks)
        for answer in candidates
    )
    assert best / len(tasks) <= 0.10
    yes_no = [task["answer"] for task in tasks if task["verifier"] == "yes_no"]
    assert abs(yes_no.count("yes") - yes_no.count("no")) <= 1


def test_task_ids_are_unique(all_tasks):
    ids = list(all_tasks["train"]["task_id"]) + list(all_tasks["heldout"]["task_id"])
    assert len(ids) == len(set(ids))


def test_load_tasks_has_the_contract_columns_and_filters_categories():
    dates = load_tasks("heldout", categories=["dates"])
    assert isinstance(dates, datasets.Dataset)
    assert sorted(dates.column_names) == COLUMNS
    assert set(dates["category"]) == {"dates"}


def test_unknown_category_or_split_names_the_valid_ones():
    with pytest.raises(ValueError, match="the categories are arithmetic, strings, lists, dates, code"):
        load_tasks("train", categories=["algebra"])
    with pytest.raises(ValueError, match="the splits are train, heldout"):
        load_tasks("test")


def test_easy_arithmetic_is_mixed_in_for_a_nonzero_reward(all_tasks):
    easy = [p for p in all_tasks["train"]["prompt"] if re.fullmatch(r"What is \d\d? \+ \d\d?\?", p)]
    assert len(easy) >= 20


def test_every_oracle_program_prints_the_expected_answer(all_tasks):
    """The generator's own programs (trusted code) agree with the stored answers."""
    verifiers = default_verifiers()
    for split in SPLITS:
        for task in all_tasks[split]:
            output = io.StringIO()
            with contextlib.redirect_stdout(output):
                exec(json.loads(task["extra"])["oracle_code"], {})  # noqa: S102
            if task["verifier"] == "unit_tests":
                assert output.getvalue().strip() == "tests passed"
                continue
            printed = output.getvalue().strip().splitlines()[-1]
            verdict = verifiers[task["verifier"]](printed, task)
            assert verdict.correct, (task["task_id"], printed, verdict)


def test_user_tasks_load_from_jsonl_with_defaults(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text('{"prompt": "2+2?", "answer": 4}\n\n{"prompt": "Capital of France?", '
                    '"answer": "Paris", "verifier": "exact", "extra": {"hint": 1}}\n')
    tasks = load_tasks(path=path)
    assert sorted(tasks.column_names) == COLUMNS
    assert tasks[0] == {"task_id": "task-0", "category": "default", "prompt": "2+2?",
                        "answer": "4", "verifier": "exact", "extra": "{}"}
    assert json.loads(tasks[1]["extra"]) == {"hint": 1}


def test_user_tasks_load_from_parquet(tmp_path):
    path = tmp_path / "mine.parquet"
    datasets.Dataset.from_list([{"prompt": "1+1?", "answer": "2", "verifier": "numeric"}]
                               ).to_parquet(str(path))
    tasks = load_tasks(path=path)
    assert tasks[0]["verifier"] == "numeric" and tasks[0]["answer"] == "2"


def test_user_file_without_answers_is_rejected(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "2+2?"}\n')
    with pytest.raises(TaskFileError, match="no 'answer' column"):
        load_tasks(path=path)


def test_the_handwritten_heldout_file_is_apart_from_the_generator(all_tasks):
    """`envs/tasks/handwritten/heldout.jsonl`: tasks phrased by hand, at least 8 per category of
    the main job, none of them a generator prompt, every one loadable as a user task file."""
    path = DATA_DIR.parent / "handwritten" / "heldout.jsonl"
    tasks = load_tasks(path=path).to_list()
    counts = {category: sum(t["category"] == category for t in tasks)
              for category in ("arithmetic", "strings", "lists", "dates")}
    assert min(counts.values()) >= 8, counts
    generated = set(all_tasks["train"]["prompt"]) | set(all_tasks["heldout"]["prompt"])
    assert not {t["prompt"] for t in tasks} & generated
    verifiers = default_verifiers()
    for task in tasks:
        assert as_verdict(verifiers[task["verifier"]](task["answer"], task)).reward == 1.0
