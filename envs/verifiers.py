"""Verifiers: turn a final answer into a reward, one per task family.

A verifier is any callable `(answer: str, task: Mapping) -> Verdict | float | bool`. The task
row's `verifier` column names which one a `ToolEnv` uses: `exact`, `numeric`, `yes_no` or
`unit_tests`. The numeric and yes/no verifiers read a sentence the way a grader would (the last
number, the first yes or no), so a weak model's right answer in prose still counts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from envs.sandbox_pool import acquire_session

__all__ = [
    "UnitTestVerifier",
    "Verdict",
    "Verifier",
    "as_verdict",
    "default_verifiers",
    "exact_match",
    "extract_code",
    "normalize_text",
    "numeric_match",
    "parse_number",
    "yes_no_match",
]

# Commas only as thousands separators ("1,234,567"), so "1,2,3" is three numbers, not 123.
_NUMBER = re.compile(
    r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+(?:_\d+)*)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+"
)
_RATIO = re.compile(r"[-+]?\d+\s*/\s*\d+")  # "1/2" as a whole answer
_FENCE = re.compile(r"```[\w+-]*\n?(.*?)```", re.DOTALL)
_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Verdict:
    """The verifier's judgement: the reward, whether it counts as solved, and why."""

    reward: float
    correct: bool
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Verifier = Callable[[str, Mapping[str, Any]], "Verdict | float | bool"]


def as_verdict(value: Verdict | float | bool) -> Verdict:
    """Accept the plain floats and bools a user's reward function may return."""
    if isinstance(value, Verdict):
        return value
    reward = float(value)
    return Verdict(reward=reward, correct=reward > 0)


def normalize_text(text: str) -> str:
    """Case, surrounding quotes/backticks, a trailing period and spacing (also around commas,
    so "[1,2]" equals "[1, 2]") do not count."""
    text = text.strip()
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    quotes = "`'\" \n\t"
    text = text.strip(quotes).rstrip(".").strip(quotes)
    text = re.sub(r"\s*,\s*", ", ", text)
    return " ".join(text.split()).casefold()


def exact_match(answer: str, task: Mapping[str, Any]) -> Verdict:
    """Reward 1 when the normalized answer equals the normalized expected answer."""
    expected = normalize_text(str(task["answer"]))
    seen = normalize_text(answer)
    if seen == expected:
        return Verdict(1.0, True, "exact match")
    return Verdict(0.0, False, f"expected {expected!r}, got {_short(seen)!r}")


def parse_number(text: str) -> Fraction | None:
    """A number as an exact Fraction (big integers stay exact), or None if it has none.

    Thousands separators and underscores are ignored. Text holding several numbers yields the
    last one, as GSM8K's flexible extraction does: "95 + 53 = 148" is 148, because working shown
    before a result is how a weak model answers in prose.
    """
    cleaned = normalize_text(text)
    if not (_NUMBER.fullmatch(cleaned) or _RATIO.fullmatch(cleaned)):
        found = _NUMBER.findall(text)
        if not found:
            return None
        cleaned = found[-1]
    try:
        return Fraction(cleaned.replace(",", "").replace("_", "").replace(" ", ""))
    except (ValueError, ZeroDivisionError):
        return None


def numeric_match(answer: str, task: Mapping[str, Any], rel_tol: float = 1e-6) -> Verdict:
    """Reward 1 when the answer is the expected number: exact for integers, otherwise within
    `rel_tol` of it (an absolute tolerance when the expected value is below 1)."""
    expected = parse_number(str(task["answer"]))
    if expected is None:
        raise ValueError(
            f"task {task.get('task_id')!r} has a non-numeric answer {task['answer']!r} but uses "
            "the numeric verifier; set its verifier to 'exact'"
        )
    seen = parse_number(answer)
    if seen is None:
        return Verdict(0.0, False, f"no number in {_short(answer)!r}")
    if expected.denominator == 1 and seen.denominator == 1:
        correct = seen == expected
    else:
        correct = abs(seen - expected) <= rel_tol * max(abs(expected), 1)
    if correct:
        return Verdict(1.0, True, "numeric match")
    return Verdict(0.0, False, f"expected {task['answer']}, got {_short(answer)!r}")


def yes_no_match(answer: str, task: Mapping[str, Any]) -> Verdict:
    """Reward 1 when the answer's first "yes" or "no" is the expected one ("No, 1958 is not")."""
    expected = normalize_text(str(task["answer"]))
    if expected not in ("yes", "no"):
        raise ValueError(
            f"task {task.get('task_id')!r} has the answer {task['answer']!r} but uses the yes_no "
            "verifier; set its verifier to 'exact'"
        )
    found = _YES_NO.search(answer)
    if found is None:
        return Verdict(0.0, False, f"no yes or no in {_short(answer)!r}")
    if found.group(1).casefold() == expected:
        return Verdict(1.0, True, "yes/no match")
    return Verdict(0.0, False, f"expected {expected!r}, got {_short(answer)!r}")


def extract_code(answer: str) -> str:
    """The code inside the first Markdown fence, or the whole answer if it has none."""
    fenced = _FENCE.search(answer)
    return (fenced.group(1) if fenced else answer).strip() + "\n"


class UnitTestVerifier:
    """Runs the answer's code and then the task's unit tests in a fresh sandbox session.

    The task's `extra` JSON holds `tests`: Python code with asserts. Reward 1 when the tests run
    without an error within the sandbox limits.
    """

    def __init__(self, sandbox_config: Any = None):
        self.sandbox_config = sandbox_config

    def __call__(self, answer: str, task: Mapping[str, Any]) -> Verdict:
        extra = task.get("extra") or "{}"
        tests = (json.loads(extra) if isinstance(extra, str) else extra).get("tests")
        if not tests:
            raise ValueError(
                f"task {task.get('task_id')!r} uses the unit_tests verifier but its extra has no "
                "'tests' code"
            )
        program = extract_code(answer) + "\n" + tests
        # No sandbox raises envs.sandbox_pool.SandboxUnavailableError: an answer nobody could check is an env
        # error (its group is dropped with that reason), never a wrong answer to train on.
        session, pool = acquire_session(self.sandbox_config, purpose="verify")
        try:
            result = session.run(program)
        finally:
            pool.release(session)
        if result.ok:
            return Verdict(1.0, True, "all unit tests passed")
        reason = result.limit or (result.error or result.stderr or "failed").strip().splitlines()
        detail = reason if isinstance(reason, str) else (reason[-1] if reason else "failed")
        return Verdict(0.0, False, f"unit tests failed: {_short(detail)}")


def default_verifiers(sandbox_config: Any = None) -> dict[str, Verifier]:
    """The verifiers the shipped task sets name in their `verifier` column."""
    return {
        "exact": exact_match,
        "numeric": numeric_match,
        "yes_no": yes_no_match,
        "unit_tests": UnitTestVerifier(sandbox_config),
    }


def _short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
