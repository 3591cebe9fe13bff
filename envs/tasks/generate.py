"""Generate the shipped task sets, reproducibly: `python -m envs.tasks.generate [--check]`.

Five categories where a Python tool helps: exact arithmetic (from "17 + 25" to 25-digit
products), string manipulation, list operations, date and calendar questions, and small
functions checked by unit tests. Easy items are mixed in on purpose: RL needs a weak model to
get a nonzero reward sometimes. No category can be passed by a constant answer: yes/no
questions are half yes, and numeric answers are spread (`tests/envs/test_tasks.py` checks the best
constant answer per category on the held-out split).

The split is a function of the prompt text (a SHA-256 hash), so train and held-out tasks can
never overlap, whatever the seed or sizes. Each task's `extra` holds `oracle_code`, a program
that prints the answer (the `oracle` policy runs it through the python tool), and code tasks
also hold their `tests`.
"""

from __future__ import annotations

import argparse
import calendar
import datetime
import hashlib
import json
import math
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envs.tasks import CATEGORIES, DATA_DIR, SPLITS

DEFAULT_SIZES = {"train": 200, "heldout": 50}
DEFAULT_SEED = 0
HELDOUT_PERCENT = 20

Task = dict[str, Any]

WORDS = (
    "apple banana cherry dragon eleven forest guitar harbor island jungle kitten lemon mango "
    "needle orange pepper quartz rabbit salmon tomato umbrella violin walnut yellow zipper "
    "strawberry mississippi bookkeeper algorithm parallel committee balloon coffee letter "
    "address success assessment occurrence banana planet rocket python matrix vector"
).split()
WEEKDAYS = tuple(calendar.day_name)


def split_of(prompt: str) -> str:
    """Held-out or train, decided by the prompt's hash alone (so the splits are disjoint)."""
    digest = hashlib.sha256(prompt.encode("utf-8")).digest()
    return "heldout" if digest[0] * 100 < HELDOUT_PERCENT * 256 else "train"


def make_task(
    category: str, prompt: str, answer: Any, verifier: str, oracle_code: str, **extra: Any
) -> Task:
    task_id = f"{category}-{hashlib.sha256(prompt.encode('utf-8')).hexdigest()[:10]}"
    extra_json = json.dumps({"oracle_code": oracle_code, **extra}, sort_keys=True)
    return {
        "task_id": task_id,
        "category": category,
        "prompt": prompt,
        "answer": str(answer),
        "verifier": verifier,
        "extra": extra_json,
    }


def _digits(rng: random.Random, low: int, high: int) -> int:
    count = rng.randint(low, high)
    return rng.randint(10 ** (count - 1), 10**count - 1)


def arithmetic_task(rng: random.Random) -> Task:
    kind = rng.choice(
        ["add", "add", "sub", "mul_small", "mul3", "big_mul", "big_add", "power", "mod", "fact"]
    )
    if kind == "add":
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        prompt, expr = f"What is {a} + {b}?", f"{a} + {b}"
    elif kind == "sub":
        a, b = rng.randint(20, 199), rng.randint(1, 99)
        prompt, expr = f"What is {a} - {b}?", f"{a} - {b}"
    elif kind == "mul_small":
        a, b = rng.randint(2, 15), rng.randint(2, 15)
        prompt, expr = f"What is {a} * {b}?", f"{a} * {b}"
    elif kind == "mul3":
        a, b = _digits(rng, 3, 4), _digits(rng, 3, 4)
        prompt, expr = f"What is {a} * {b}?", f"{a} * {b}"
    elif kind == "big_mul":
        a, b = _digits(rng, 12, 25), _digits(rng, 12, 25)
        prompt, expr = f"Compute the exact product {a} * {b}.", f"{a} * {b}"
    elif kind == "big_add":
        a, b = _digits(rng, 18, 30), _digits(rng, 18, 30)
        prompt, expr = f"Compute the exact sum {a} + {b}.", f"{a} + {b}"
    elif kind == "power":
        base, exponent = rng.randint(2, 9), rng.randint(20, 70)
        prompt, expr = f"What is {base} to the power of {exponent}?", f"{base} ** {exponent}"
    elif kind == "mod":
        a, m = _digits(rng, 15, 25), rng.randint(7, 997)
        prompt, expr = f"What is the remainder when {a} is divided by {m}?", f"{a} % {m}"
    else:
        n = rng.randint(15, 60)
        prompt = f"What is the sum of the digits of {n}! ({n} factorial)?"
        expr = f"sum(int(d) for d in str(math.factorial({n})))"
        return make_task(
            "arithmetic", prompt, sum(int(d) for d in str(math.factorial(n))), "numeric",
            f"import math\nprint({expr})",
        )
    return make_task("arithmetic", prompt, eval(expr), "numeric", f"print({expr})")  # noqa: S307


def strings_task(rng: random.Random) -> Task:
    kind = rng.choice(
        ["reverse", "count_letter", "length", "sorted_letters", "vowels", "word_count"]
    )
    word = rng.choice(WORDS)
    if kind == "reverse":
        text = rng.choice([word, " ".join(rng.sample(WORDS, 2))])
        return make_task("strings", f"Reverse the string '{text}'.", text[::-1], "exact",
                         f"print({text!r}[::-1])")
    if kind == "count_letter":
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12)))
        letter = rng.choice(sorted(set(text.replace(" ", ""))))
        return make_task(
            "strings", f"How many times does the letter '{letter}' appear in '{text}'?",
            text.count(letter), "numeric", f"print({text!r}.count({letter!r}))",
        )
    if kind == "length":
        text = " ".join(rng.sample(WORDS, rng.randint(3, 8)))
        return make_task("strings", f"How many characters (including spaces) are in '{text}'?",
                         len(text), "numeric", f"print(len({text!r}))")
    if kind == "sorted_letters":
        return make_task(
            "strings", f"Sort the letters of '{word}' alphabetically and answer with the result.",
            "".join(sorted(word)), "exact", f"print(''.join(sorted({word!r})))",
        )
    if kind == "vowels":
        text = " ".join(rng.sample(WORDS, rng.randint(2, 6)))
        return make_task("strings", f"How many vowels (a, e, i, o, u) are in '{text}'?",
                         sum(ch in "aeiou" for ch in text), "numeric",
                         f"print(sum(ch in 'aeiou' for ch in {text!r}))")
    sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30)))
    return make_task("strings", f"How many words are in the sentence '{sentence}'?",
                     len(sentence.split()), "numeric", f"print(len({sentence!r}.split()))")


def lists_task(rng: random.Random) -> Task:
    kind = rng.choice(["sort", "sum", "second_largest", "distinct", "product", "range"])
    numbers = [rng.randint(-99, 999) for _ in range(rng.randint(6, 14))]
    if kind == "sort":
        return make_task(
            "lists", f"Sort the list {numbers} in ascending order. Answer as a Python list.",
            sorted(numbers), "exact", f"print(sorted({numbers}))",
        )
    if kind == "sum":
        return make_task("lists", f"What is the sum of the numbers in {numbers}?",
                         sum(numbers), "numeric", f"print(sum({numbers}))")
    if kind == "second_largest":
        return make_task("lists", f"What is the second largest number in {numbers}?",
                         sorted(numbers)[-2], "numeric", f"print(sorted({numbers})[-2])")
    if kind == "distinct":
        values = [rng.randint(1, 40) for _ in range(rng.randint(10, 30))]
        return make_task("lists", f"How many distinct values are in the list {values}?",
                         len(set(values)), "numeric", f"print(len(set({values})))")
    if kind == "product":
        small = [rng.randint(2, 19) for _ in range(rng.randint(5, 9))]
        return make_task("lists", f"What is the product of the numbers in {small}?",
                         math.prod(small), "numeric", f"import math\nprint(math.prod({small}))")
    return make_task(
        "lists", f"What is the largest number in {numbers} minus the smallest?",
        max(numbers) - min(numbers), "numeric", f"print(max({numbers}) - min({numbers}))",
    )


def _random_date(rng: random.Random) -> datetime.date:
    return datetime.date(1950, 1, 1) + datetime.timedelta(days=rng.randint(0, 365 * 100))


def dates_task(rng: random.Random) -> Task:
    kind = rng.choice(["weekday", "between", "add_days", "leap", "day_of_year"])
    day = _random_date(rng)
    if kind == "weekday":
        return make_task(
            "dates", f"What day of the week was {day.isoformat()}?", WEEKDAYS[day.weekday()],
            "exact",
            f"import datetime\nprint(datetime.date({day.year}, {day.month}, {day.day})"
            ".strftime('%A'))",
        )
    if kind == "between":
        other = day + datetime.timedelta(days=rng.randint(1, 2000))
        return make_task(
            "dates",
            f"How many days are there from {day.isoformat()} to {other.isoformat()}?",
            (other - day).days, "numeric",
            f"import datetime\nprint((datetime.date.fromisoformat({other.isoformat()!r}) - "
            f"datetime.date.fromisoformat({day.isoformat()!r})).days)",
        )
    if kind == "add_days":
        offset = rng.randint(1, 1000)
        result = day + datetime.timedelta(days=offset)
        return make_task(
            "dates",
            f"What date is {offset} days after {day.isoformat()}? Answer as YYYY-MM-DD.",
            result.isoformat(), "exact",
            f"import datetime\nprint(datetime.date.fromisoformat({day.isoformat()!r}) + "
            f"datetime.timedelta(days={offset}))",
        )
    if kind == "leap":
        # Half the questions are about leap years, so answering "no" to all scores half.
        year = rng.randint(1600, 2400)
        if rng.random() < 0.5:
            year = next(y for y in range(year, year + 8) if calendar.isleap(y))
        return make_task(
            "dates", f"Is {year} a leap year? Answer yes or no.",
            "yes" if calendar.isleap(year) else "no", "yes_no",
            f"import calendar\nprint('yes' if calendar.isleap({year}) else 'no')",
        )
    return make_task(
        "dates", f"What day of the year (1 to 366) is {day.isoformat()}?",
        day.timetuple().tm_yday, "numeric",
        f"import datetime\nprint(datetime.date.fromisoformat({day.isoformat()!r})"
        ".timetuple().tm_yday)",
    )


_CODE_TEMPLATES: list[tuple[str, str, str, Callable[[random.Random], dict[str, Any]]]] = [
    (
        "Write a Python function `{name}(x)` that returns x multiplied by {k} plus {c}.",
        "def {name}(x):\n    return x * {k} + {c}\n",
        "assert {name}(0) == {c}\nassert {name}(3) == {r3}\nassert {name}(-2) == {rm2}\n",
        lambda rng: (lambda k, c: {"k": k, "c": c, "r3": 3 * k + c, "rm2": -2 * k + c})(
            rng.randint(2, 30), rng.randint(0, 60)
        ),
    ),
    (
        "Write a Python function `{name}(n)` that returns True if n is divisible by {k} and "
        "False otherwise.",
        "def {name}(n):\n    return n % {k} == 0\n",
        "assert {name}({k}) is True\nassert {name}({m}) is True\nassert {name}({m1}) is False\n"
        "assert {name}(0) is True\n",
        lambda rng: (lambda k, j: {"k": k, "m": k * j, "m1": k * j + 1})(
            rng.randint(2, 40), rng.randint(2, 9)
        ),
    ),
    (
        "Write a Python function `{name}(s)` that returns the number of times the character "
        "'{ch}' appears in the string s.",
        "def {name}(s):\n    return s.count({ch!r})\n",
        "assert {name}('') == 0\nassert {name}({w!r}) == {cw}\nassert {name}({ch!r} * 3) == 3\n",
        lambda rng: (lambda ch, w: {"ch": ch, "w": w, "cw": w.count(ch)})(
            rng.choice("abcdeilmnorst"), rng.choice(WORDS)
        ),
    ),
    (
        "Write a Python function `{name}(items)` that returns a new list with every number in "
        "items multiplied by {k}.",
        "def {name}(items):\n    return [item * {k} for item in items]\n",
        "assert {name}([]) == []\nassert {name}([1, 2, 3]) == {r}\n",
        lambda rng: (lambda k: {"k": k, "r": [k, 2 * k, 3 * k]})(rng.randint(2, 50)),
    ),
    (
        "Write a Python function `{name}(items)` that returns the sum of the numbers in items "
        "that are greater than {t}.",
        "def {name}(items):\n    return sum(item for item in items if item > {t})\n",
        "assert {name}([]) == 0\nassert {name}({xs}) == {r}\n",
        lambda rng: (lambda t, xs: {"t": t, "xs": xs, "r": sum(x for x in xs if x > t)})(
            rng.randint(-5, 20), [rng.randint(-10, 40) for _ in range(6)]
        ),
    ),
    (
        "Write a Python function `{name}(n)` that returns the sum of the integers from 1 to n "
        "(inclusive) that are multiples of {k}.",
        "def {name}(n):\n    return sum(i for i in range(1, n + 1) if i % {k} == 0)\n",
        "assert {name}(0) == 0\nassert {name}({n}) == {r}\n",
        lambda rng: (lambda k, n: {"k": k, "n": n, "r": sum(range(k, n + 1, k))})(
            rng.randint(2, 12), rng.randint(20, 200)
        ),
    ),
    (
        "Write a Python function `{name}(s)` that returns the string s repeated {k} times.",
        "def {name}(s):\n    return s * {k}\n",
        "assert {name}('') == ''\nassert {name}('ab') == {r!r}\n",
        lambda rng: (lambda k: {"k": k, "r": "ab" * k})(rng.randint(2, 9)),
    ),
    (
        "Write a Python function `{name}(a, b)` that returns {k} times the larger of a and b.",
        "def {name}(a, b):\n    return {k} * max(a, b)\n",
        "assert {name}(1, 2) == {r2}\nassert {name}(5, -1) == {r5}\n",
        lambda rng: (lambda k: {"k": k, "r2": 2 * k, "r5": 5 * k})(rng.randint(1, 40)),
    ),
]
_FUNCTION_NAMES = ("solve", "compute", "transform", "calc", "helper", "process", "result")


def code_task(rng: random.Random) -> Task:
    prompt_template, solution_template, tests_template, sample = rng.choice(_CODE_TEMPLATES)
    values = {"name": rng.choice(_FUNCTION_NAMES), **sample(rng)}
    prompt = prompt_template.format(**values) + " Give the full function as your answer."
    solution = solution_template.format(**values)
    tests = tests_template.format(**values)
    return make_task(
        "code", prompt, solution, "unit_tests", f"{solution}\n{tests}print('tests passed')",
        tests=tests,
    )


GENERATORS: dict[str, Callable[[random.Random], Task]] = {
    "arithmetic": arithmetic_task,
    "strings": strings_task,
    "lists": lists_task,
    "dates": dates_task,
    "code": code_task,
}


def generate_category(
    category: str, seed: int = DEFAULT_SEED, sizes: dict[str, int] | None = None
) -> dict[str, list[Task]]:
    """Draw tasks until each split is full; a duplicate or a full split's task is skipped."""
    sizes = sizes or DEFAULT_SIZES
    rng = random.Random(f"{seed}-{category}")
    splits: dict[str, list[Task]] = {split: [] for split in SPLITS}
    seen: set[str] = set()
    attempts = 0
    while any(len(splits[split]) < sizes[split] for split in SPLITS):
        attempts += 1
        if attempts > 100 * sum(sizes.values()):
            raise RuntimeError(f"category {category!r} cannot produce {sizes} distinct tasks")
        task = GENERATORS[category](rng)
        split = split_of(task["prompt"])
        if task["prompt"] in seen or len(splits[split]) >= sizes[split]:
            continue
        if task["verifier"] == "yes_no" and _yes_no_tilt(splits[split], task["answer"]) > 1:
            continue
        seen.add(task["prompt"])
        splits[split].append(task)
    return splits


def _yes_no_tilt(tasks: list[Task], answer: str) -> int:
    """How far yes and no answers would be apart in `tasks` with one more `answer`."""
    answers = [task["answer"] for task in tasks if task["verifier"] == "yes_no"] + [answer]
    return abs(answers.count("yes") - answers.count("no"))


def render_jsonl(tasks: list[Task]) -> str:
    return "".join(json.dumps(task, sort_keys=True, ensure_ascii=False) + "\n" for task in tasks)


def generate_files(seed: int = DEFAULT_SEED) -> dict[str, str]:
    """File name -> JSONL text for every category and split."""
    files = {}
    for category in CATEGORIES:
        for split, tasks in generate_category(category, seed).items():
            files[f"{category}_{split}.jsonl"] = render_jsonl(tasks)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--out", type=Path, default=DATA_DIR)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    files = generate_files(args.seed)
    if args.check:
        stale = [name for name, text in files.items()
                 if not (args.out / name).exists() or (args.out / name).read_text() != text]
        for name in stale:
            print(f"{args.out / name} differs from the generator's output", file=sys.stderr)
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (args.out / name).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
