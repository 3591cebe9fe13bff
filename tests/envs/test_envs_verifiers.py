"""Verifiers turn final answers into rewards; the spaces describe what the envs exchange."""

from __future__ import annotations

import pytest

from envs.spaces import AssistantText, MessagesSpace
from envs.verifiers import exact_match, extract_code, numeric_match, yes_no_match

BIG = "123456789012345678901234567890123456789"


@pytest.mark.parametrize(
    "given, expected, correct",
    [
        (BIG, BIG, True),
        (str(int(BIG) + 1), BIG, False),
        ("1,234,567", "1234567", True),
        ("The answer is 42.", "42", True),
        ("Between 41 and 43", "42", False),
        ("95 + 53 = 148", "148", True),
        ("It is 148, not 149", "148", False),
        ("no digits here", "42", False),
        ("1,2,3", "3", True),
        ("3 4", "34", False),
        ("1/2", "0.5", True),
        ("0.30000000000000004", "0.3", True),
        ("-7", "-7", True),
        ("forty-two", "42", False),
    ],
)
def test_numeric_match_is_exact_for_integers_and_tolerant_for_decimals(given, expected, correct):
    assert numeric_match(given, {"answer": expected}).correct is correct


@pytest.mark.parametrize(
    "given, expected, correct",
    [
        ("  'Tuesday'. ", "Tuesday", True),
        ("tuesday", "Tuesday", True),
        ("[3,5,  9]", "[3, 5, 9]", True),
        ("`mhtirogla`", "mhtirogla", True),
        ("Monday", "Tuesday", False),
    ],
)
def test_exact_match_ignores_case_quotes_spacing_and_a_trailing_period(given, expected, correct):
    assert exact_match(given, {"answer": expected}).correct is correct


@pytest.mark.parametrize(
    "given, expected, correct",
    [
        ("No. 1958 is not a leap year.", "no", True),
        ("yes", "yes", True),
        ("2020 is a leap year, so the answer is yes.", "yes", True),
        ("Yes, it is.", "no", False),
        ("It is a leap year.", "yes", False),
        ("Nobody knows", "no", False),
    ],
)
def test_yes_no_match_takes_the_first_yes_or_no_word(given, expected, correct):
    assert yes_no_match(given, {"answer": expected}).correct is correct


def test_yes_no_verifier_on_another_answer_says_how_to_fix_it():
    with pytest.raises(ValueError, match="set its verifier to 'exact'"):
        yes_no_match("yes", {"task_id": "t", "answer": "Paris"})


def test_numeric_verifier_on_a_non_numeric_task_says_how_to_fix_it():
    with pytest.raises(ValueError, match="set its verifier to 'exact'"):
        numeric_match("1", {"task_id": "t", "answer": "Paris"})


def test_code_is_taken_from_the_first_markdown_fence():
    assert extract_code("Here:\n```python\ndef f():\n    return 1\n```\nDone.") == (
        "def f():\n    return 1\n"
    )
    assert extract_code("def f(): return 1") == "def f(): return 1\n"


def test_messages_space_samples_are_members_and_rejects_malformed_messages():
    space = MessagesSpace(seed=0)
    assert all(space.sample() in space for _ in range(20))
    assert [{"role": "tool", "name": "python", "content": "1"}] in space
    assert [{"role": "robot", "content": "1"}] not in space
    assert [{"role": "user", "content": 1}] not in space
    assert [{"role": "user", "content": "x", "extra": 1}] not in space
    assert {"role": "user", "content": "x"} not in space


def test_assistant_text_contains_any_unicode_and_samples_short_turns():
    space = AssistantText(max_length=1_000_000, seed=0)
    assert "<tool_call>{\"name\": \"é\"}</tool_call> 🙂" in space
    assert all(len(space.sample()) <= AssistantText.SAMPLE_MAX_LENGTH for _ in range(20))
