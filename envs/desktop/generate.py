"""Generated desktop tasks: many instances of the shipped task kinds, split by instance.

Each kind (`KINDS`) draws its parameters (folder and file names, file contents, texts to type,
which windows are open and which one to act on) from a seeded `random.Random` and builds a full
OSWorld task dict from them: instruction, `config` set-up steps, and an `evaluator` that checks
the end state for real (file contents, folder listings, window titles and states), so doing
nothing scores 0. The kinds are those of the shipped tasks in the four domains: terminal,
editor, file_manager and window.

The split is a function of the parameters alone (a SHA-256 hash of the kind and its parameters),
so a train instance and a held-out instance never share all their parameters, whatever the seed
or sizes. The same seed gives the same tasks. Each task keeps its kind and parameters under
`generator`, which `envs.desktop.oracle` solves it from; the env shows the model the instruction
only.

`DesktopEnv(task_source="generated")` (registered as `agent_rl/DesktopGen-v0`) draws from
`load_generated_tasks`; `python -m envs.desktop.generate --out DIR` writes the tasks in OSWorld's
layout (`examples/<domain>/<id>.json`, `train.json`, `heldout.json`), which
`load_desktop_tasks(split, tasks_dir=DIR)` reads back.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets

from envs.desktop.tasks import SPLITS, check_task, task_to_row

__all__ = [
    "DEFAULT_PER_DOMAIN",
    "DEFAULT_SEED",
    "DOMAINS",
    "KINDS",
    "TaskKind",
    "generate_tasks",
    "load_generated_tasks",
    "split_of",
]

HOME = "/home/user"
DEFAULT_SEED = 0
DEFAULT_PER_DOMAIN = {"train": 64, "heldout": 16}
HELDOUT_PERCENT = 25
_MAX_DRAWS_PER_TASK = 400  # rejection sampling: a kind whose space is too small says so

Params = dict[str, Any]
Task = dict[str, Any]

# Names and texts the kinds draw from. No name is a substring of another (evaluators look for
# names in window titles and listings), and every text types plainly (no quotes or shell syntax).
FOLDERS = (
    "archive", "backups", "budget", "clients", "drafts", "exports", "games", "homework",
    "invoices", "journal", "lectures", "maps", "music", "novels", "outbox", "papers", "photos",
    "podcasts", "projects", "recipes", "reports", "receipts", "scans", "scripts", "slides",
    "sketches", "taxes", "templates", "travel", "videos", "wallpapers", "website",
)
STEMS = (
    "agenda", "chores", "diary", "errands", "goals", "groceries", "ideas", "inventory", "letter",
    "memo", "minutes", "notes", "outline", "plan", "poem", "quotes", "readme", "reminders",
    "schedule", "summary", "todo", "wishlist",
)
DATA_STEMS = ("data", "guests", "members", "orders", "scores", "sales", "visits", "votes")
TEXT_EXTENSIONS = ("txt", "md")
LINES = (
    "buy milk", "call the bank", "water the plants", "pay rent", "book a dentist visit",
    "renew the passport", "fix the bike", "send the invoice", "clean the kitchen",
    "walk the dog", "read chapter three", "email the landlord", "back up the laptop",
    "order new ink", "plan the trip", "return the library books", "bake bread",
    "mow the lawn", "update the budget", "write to grandma",
)
HEADERS = (
    "# Shopping list", "# Weekend plans", "# Open questions", "# Reading list",
    "# Packing list", "# Meeting notes", "# Ideas", "# Chores",
)
GREETINGS = (
    "Dear team,", "Hello everyone,", "Hi Sam,", "Good morning,", "Dear neighbours,",
    "Thanks for coming,", "Welcome aboard,", "Dear Professor Lee,",
)
NAMES = (
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
    "mallory", "niaj", "olivia", "peggy", "rupert", "sybil", "trent", "victor", "walter",
)
EXTENSIONS = ("log", "tmp", "bak", "csv", "jpg")
KEEP_EXTENSIONS = ("txt", "md", "py", "pdf")
# X-only apps with a small X listing (xcalc lists every key), each window titled by its name.
WINDOW_APPS = ("xlogo", "xclock", "xeyes", "xload")


@dataclass(frozen=True)
class TaskKind:
    """One kind of task: `draw` picks parameters, `build` makes (instruction, config,
    evaluator) from them."""

    name: str
    domain: str
    draw: Callable[[random.Random], Params]
    build: Callable[[Params], tuple[str, list[dict[str, Any]], dict[str, Any]]]


def _launch(*command: str) -> dict[str, Any]:
    return {"type": "launch", "parameters": {"command": list(command)}}


def _create_file(path: str, content: str) -> dict[str, Any]:
    return {"type": "create_file", "parameters": {"path": path, "content": content}}


def _shell(script: str) -> dict[str, Any]:
    return {"type": "execute", "parameters": {"command": ["bash", "-c", script]}}


def _output_is(command: str, expected: str) -> dict[str, Any]:
    """The evaluator: the command's standard output on the desktop is exactly `expected`."""
    return {"func": "exact_match",
            "result": {"type": "vm_command_line", "command": command, "shell": True},
            "expected": {"type": "rule", "rules": {"expected": expected}}}


def _includes(result: dict[str, Any], include: list[str], exclude: list[str]) -> dict[str, Any]:
    return {"func": "check_include_exclude", "result": result,
            "expected": {"type": "rule", "rules": {"include": include, "exclude": exclude}}}


def _text_file(rng: random.Random) -> str:
    return f"{rng.choice(STEMS)}.{rng.choice(TEXT_EXTENSIONS)}"


# Terminal: a shell command in xfce4-terminal does each of these.

def _terminal(script: str | None = None) -> list[dict[str, Any]]:
    return [*([_shell(script)] if script else []), _launch("xfce4-terminal")]


def _make_folder(p: Params):
    return (f"Using the terminal, create a folder named {p['folder']} in the home folder "
            f"({HOME}).", _terminal(),
            _output_is(f"test -d {HOME}/{p['folder']} && echo yes || echo no", "yes\n"))


def _write_line(p: Params):
    path = f"{HOME}/{p['file']}"
    return (f"Create the file {path} whose only line is: {p['text']}", _terminal(),
            _output_is(f"cat {path}", p["text"] + "\n"))


def _rename_file(p: Params):
    source, target = f"{HOME}/{p['source']}", f"{HOME}/{p['target']}"
    return (f"Rename {source} to {target}.",
            [_create_file(source, p["content"] + "\n"), _launch("xfce4-terminal")],
            _output_is(f"test -e {source} && echo still-there; cat {target}", p["content"] + "\n"))


def _count_lines(p: Params):
    data, out = f"{HOME}/{p['file']}", f"{HOME}/{p['out']}"
    rows = ["id,name", *(f"{i},{name}" for i, name in enumerate(p["names"], start=1))]
    return (f"Write the number of lines in {data} into the file {out} (just the number).",
            [_create_file(data, "\n".join(rows) + "\n"), _launch("xfce4-terminal")],
            _output_is(f"tr -d ' \\n' < {out}", str(len(rows))))


def _sort_lines(p: Params):
    source, out = f"{HOME}/{p['file']}", f"{HOME}/{p['out']}"
    return (f"Write the lines of {source} in alphabetical order to {out}.",
            [_create_file(source, "\n".join(p["names"]) + "\n"), _launch("xfce4-terminal")],
            _output_is(f"cat {out}", "\n".join(sorted(p["names"])) + "\n"))


def _delete_by_extension(p: Params):
    folder = f"{HOME}/{p['folder']}"
    files = sorted([*p["doomed"], *p["kept"]])
    script = f"mkdir -p {folder} && cd {folder} && " + " && ".join(
        f"echo {name.split('.')[0]} > {name}" for name in files)
    return (f"Delete every .{p['extension']} file in {folder}, keeping all other files there.",
            _terminal(script),
            _output_is(f"ls -1 {folder} | LC_ALL=C sort", "".join(f"{n}\n" for n in sorted(p["kept"]))))


def _copy_folder(p: Params):
    source, target = f"{HOME}/{p['folder']}", f"{HOME}/{p['backup']}/{p['folder']}"
    script = f"mkdir -p {source} && " + " && ".join(
        f"echo {i} > {source}/{name}" for i, name in enumerate(p["files"], start=1))
    listing = "".join(f"{name}\n" for name in sorted(p["files"]))
    return (f"Copy the folder {source}, with its contents, to {target}.", _terminal(script),
            _output_is(f"for d in {target} {source}; do echo \"$d:\"; LC_ALL=C ls -1 \"$d\"; done",
                       f"{target}:\n{listing}{source}:\n{listing}"))


def _make_executable(p: Params):
    path = f"{HOME}/{p['script']}"
    return (f"Make the script {path} executable.",
            [_create_file(path, f"#!/bin/sh\necho {p['word']}\n"), _launch("xfce4-terminal")],
            _output_is(f"test -x {path} && test -s {path} && echo yes || echo no", "yes\n"))


# Editor: mousepad opens the file; the agent edits and saves it.

def _editor(path: str, content: str | None) -> list[dict[str, Any]]:
    create = [_create_file(path, content)] if content is not None else []
    return [*create, _launch("mousepad", path)]


def _append_line(p: Params):
    path = f"{HOME}/{p['file']}"
    before = "".join(f"{line}\n" for line in p["lines"])
    return (f"In the text editor, add a last line '{p['new']}' to the open file and save it.",
            _editor(path, before), _output_is(f"cat {path}", before + p["new"] + "\n"))


def _insert_header(p: Params):
    path = f"{HOME}/{p['file']}"
    before = "".join(f"{line}\n" for line in p["lines"])
    return (f"In the text editor, insert the line '{p['header']}' above the first line of the "
            "open file and save it.",
            _editor(path, before), _output_is(f"cat {path}", f"{p['header']}\n{before}"))


def _replace_first_line(p: Params):
    path = f"{HOME}/{p['file']}"
    first, *rest = p["lines"]
    after = "".join(f"{line}\n" for line in [f"DONE: {first}", *rest])
    return (f"In the text editor, change the first line of the open file from 'TODO: {first}' "
            f"to 'DONE: {first}', keep the other lines, and save.",
            _editor(path, "".join(f"{line}\n" for line in [f"TODO: {first}", *rest])),
            _output_is(f"cat {path}", after))


def _write_greeting(p: Params):
    path = f"{HOME}/{p['file']}"
    return (f"Type the text '{p['text']}' into the empty file open in the text editor and save it.",
            _editor(path, None), _output_is(f"cat {path}", p["text"]))


def _empty_file(p: Params):
    path = f"{HOME}/{p['file']}"
    return ("Delete all the text in the file open in the text editor and save the empty file.",
            _editor(path, "".join(f"{line}\n" for line in p["lines"])),
            _output_is(f"wc -c < {path}", "0\n"))


# File manager: pcmanfm shows the home folder.

def _new_folder(p: Params):
    return (f"Using the file manager, create a new folder named {p['folder']} in {HOME}.",
            [_launch("pcmanfm", HOME)],
            _output_is(f"test -d {HOME}/{p['folder']} && echo yes || echo no", "yes\n"))


def _new_file(p: Params):
    return (f"Using the file manager, create an empty file named {p['file']} in {HOME}.",
            [_launch("pcmanfm", HOME)],
            _output_is(f"test -f {HOME}/{p['file']} && echo yes || echo no", "yes\n"))


def _open_folder(p: Params):
    script = " && ".join(f"mkdir -p {HOME}/{folder} && echo {folder} > {HOME}/{folder}/{folder}.txt"
                         for folder in p["folders"])
    others = [folder for folder in p["folders"] if folder != p["target"]]
    return (f"In the file manager, open the folder {HOME}/{p['target']} so its contents are shown.",
            [_shell(script), _launch("pcmanfm", HOME)],
            _includes({"type": "window_titles"}, [p["target"]], others))


# Window management: X-only apps, each window titled by its program's name.

def _windows(apps: list[str]) -> list[dict[str, Any]]:
    return [_launch(app) for app in apps]


def _close_one(p: Params):
    others = [app for app in p["apps"] if app != p["target"]]
    return (f"Close the {p['target']} window, leaving the other windows open.",
            _windows(p["apps"]), _includes({"type": "window_titles"}, others, [p["target"]]))


def _maximize(p: Params):
    return (f"Maximize the {p['target']} window.", _windows(p["apps"]),
            _includes({"type": "vm_command_line", "shell": True,
                       "command": f"xprop -name {p['target']} _NET_WM_STATE"},
                      ["MAXIMIZED_VERT", "MAXIMIZED_HORZ"], []))


def _close_all(p: Params):
    return ("Close every open window.", _windows(p["apps"]),
            _output_is("xdotool search --onlyvisible --name . | wc -l", "0\n"))


def _draw_folder(rng: random.Random) -> Params:
    return {"folder": rng.choice(FOLDERS)}


def _draw_text_file(rng: random.Random) -> Params:
    return {"file": _text_file(rng)}


def _draw_line(rng: random.Random) -> Params:
    return {"file": _text_file(rng), "text": rng.choice(LINES)}


def _draw_rename(rng: random.Random) -> Params:
    source, target = rng.sample(STEMS, 2)
    return {"source": f"{source}.txt", "target": f"{target}.txt", "content": rng.choice(LINES)}


def _draw_count(rng: random.Random) -> Params:
    return {"file": f"{rng.choice(DATA_STEMS)}.csv", "out": f"{rng.choice(STEMS)}.txt",
            "names": rng.sample(NAMES, rng.randint(2, 9))}


def _draw_sort(rng: random.Random) -> Params:
    source, out = rng.sample(STEMS, 2)
    return {"file": f"{source}.txt", "out": f"{out}.txt",
            "names": rng.sample(NAMES, rng.randint(3, 6))}


def _draw_delete(rng: random.Random) -> Params:
    extension = rng.choice(EXTENSIONS)
    stems = rng.sample(STEMS, rng.randint(2, 5))
    cut = rng.randint(1, len(stems) - 1)
    return {"folder": rng.choice(FOLDERS), "extension": extension,
            "doomed": sorted(f"{stem}.{extension}" for stem in stems[:cut]),
            "kept": sorted(f"{stem}.{rng.choice(KEEP_EXTENSIONS)}" for stem in stems[cut:])}


def _draw_copy(rng: random.Random) -> Params:
    folder, backup = rng.sample(FOLDERS, 2)
    return {"folder": folder, "backup": backup,
            "files": sorted(f"{stem}.{rng.choice(EXTENSIONS)}"
                            for stem in rng.sample(STEMS, rng.randint(1, 3)))}


def _draw_script(rng: random.Random) -> Params:
    return {"script": f"{rng.choice(STEMS)}.sh", "word": rng.choice(NAMES)}


def _draw_lines(rng: random.Random, low: int = 1, high: int = 3) -> Params:
    return {"file": _text_file(rng), "lines": rng.sample(LINES, rng.randint(low, high))}


def _draw_append(rng: random.Random) -> Params:
    params = _draw_lines(rng)
    return params | {"new": rng.choice([line for line in LINES if line not in params["lines"]])}


def _draw_header(rng: random.Random) -> Params:
    return _draw_lines(rng) | {"header": rng.choice(HEADERS)}


def _draw_greeting(rng: random.Random) -> Params:
    return {"file": _text_file(rng), "text": rng.choice(GREETINGS)}


def _draw_folders(rng: random.Random) -> Params:
    folders = rng.sample(FOLDERS, rng.randint(1, 3))
    return {"folders": folders, "target": rng.choice(folders)}


def _draw_windows(rng: random.Random) -> Params:
    return {"apps": rng.sample(WINDOW_APPS, rng.randint(2, 3))}


def _draw_window_choice(rng: random.Random) -> Params:
    params = _draw_windows(rng)
    return params | {"target": rng.choice(params["apps"])}


KINDS: tuple[TaskKind, ...] = (
    TaskKind("make-folder", "terminal", _draw_folder, _make_folder),
    TaskKind("write-line", "terminal", _draw_line, _write_line),
    TaskKind("rename-file", "terminal", _draw_rename, _rename_file),
    TaskKind("count-lines", "terminal", _draw_count, _count_lines),
    TaskKind("sort-lines", "terminal", _draw_sort, _sort_lines),
    TaskKind("delete-by-extension", "terminal", _draw_delete, _delete_by_extension),
    TaskKind("copy-folder", "terminal", _draw_copy, _copy_folder),
    TaskKind("make-executable", "terminal", _draw_script, _make_executable),
    TaskKind("append-line", "editor", _draw_append, _append_line),
    TaskKind("insert-header", "editor", _draw_header, _insert_header),
    TaskKind("replace-first-line", "editor", lambda rng: _draw_lines(rng, 2, 3), _replace_first_line),
    TaskKind("write-greeting", "editor", _draw_greeting, _write_greeting),
    TaskKind("empty-file", "editor", _draw_lines, _empty_file),
    TaskKind("new-folder", "file_manager", _draw_folder, _new_folder),
    TaskKind("new-file", "file_manager", _draw_text_file, _new_file),
    TaskKind("open-folder", "file_manager", _draw_folders, _open_folder),
    TaskKind("close-window", "window", _draw_window_choice, _close_one),
    TaskKind("maximize-window", "window", _draw_window_choice, _maximize),
    TaskKind("close-all-windows", "window", _draw_windows, _close_all),
)
KINDS_BY_NAME = {kind.name: kind for kind in KINDS}
DOMAINS = tuple(dict.fromkeys(kind.domain for kind in KINDS))


def _fingerprint(kind: str, params: Params) -> str:
    return hashlib.sha256(json.dumps([kind, params], sort_keys=True).encode()).hexdigest()


def split_of(kind: str, params: Params) -> str:
    """Held-out or train, decided by the hash of the kind and its parameters alone."""
    return "heldout" if int(_fingerprint(kind, params)[:8], 16) % 100 < HELDOUT_PERCENT else "train"


def make_task(kind: TaskKind, params: Params) -> Task:
    """The OSWorld task dict of one instance; `generator` holds what the oracle solves it from."""
    instruction, config, evaluator = kind.build(params)
    return {
        "id": f"gen-{kind.name}-{_fingerprint(kind.name, params)[:10]}",
        "snapshot": kind.domain,
        "instruction": instruction,
        "source": "agent-rl envs/desktop/generate.py",
        "config": config,
        "trajectory": "trajectories/",
        "related_apps": [kind.domain],
        "evaluator": evaluator,
        "generator": {"kind": kind.name, "params": params},
    }


def _instances(kind: TaskKind, split: str, count: int, seed: int) -> list[Task]:
    rng = random.Random(f"{seed}:{kind.name}")
    seen: set[str] = set()
    tasks: list[Task] = []
    for _ in range(count * _MAX_DRAWS_PER_TASK):
        if len(tasks) == count:
            return tasks
        params = kind.draw(rng)
        fingerprint = _fingerprint(kind.name, params)
        if fingerprint in seen or split_of(kind.name, params) != split:
            continue
        seen.add(fingerprint)
        tasks.append(make_task(kind, params))
    if len(tasks) < count:
        raise ValueError(f"kind {kind.name!r} has only {len(tasks)} distinct {split} instances "
                         f"within {count * _MAX_DRAWS_PER_TASK} draws, {count} asked; ask fewer "
                         "per domain or widen its name pools")
    return tasks


def generate_tasks(split: str, per_domain: int | None = None, seed: int = DEFAULT_SEED,
                   categories: list[str] | None = None) -> list[Task]:
    """`per_domain` instances of each domain (default `DEFAULT_PER_DOMAIN[split]`), spread over
    its kinds and interleaved (so the first N of a domain cover its kinds), domains in
    `DOMAINS` order; `categories` keeps only those domains."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; the desktop task splits are {SPLITS}")
    per_domain = DEFAULT_PER_DOMAIN[split] if per_domain is None else per_domain
    tasks: list[Task] = []
    for domain in DOMAINS:
        if categories is not None and domain not in categories:
            continue
        kinds = [kind for kind in KINDS if kind.domain == domain]
        counts = [per_domain // len(kinds) + (i < per_domain % len(kinds)) for i in range(len(kinds))]
        columns = [_instances(kind, split, count, seed) for kind, count in zip(kinds, counts, strict=True)]
        tasks += [column[row] for row in range(max(counts)) for column in columns if row < len(column)]
    return tasks


def load_generated_tasks(split: str = "train", categories: list[str] | None = None,
                         per_domain: int | None = None, seed: int = DEFAULT_SEED) -> datasets.Dataset:
    """The generated tasks of a split as rows of `load_desktop_tasks`'s columns (task_id,
    category, prompt, answer, verifier, extra: the OSWorld task JSON)."""
    tasks = generate_tasks(split, per_domain, seed, categories)
    if not tasks:
        raise ValueError(f"no generated desktop tasks in categories {categories}; the domains "
                         f"are {', '.join(DOMAINS)}")
    return datasets.Dataset.from_list([task_to_row(task) for task in tasks])


def write_tasks(out: Path, seed: int = DEFAULT_SEED) -> dict[str, int]:
    """Both splits in OSWorld's layout under `out`; returns the count per split."""
    counts = {}
    for split in SPLITS:
        meta: dict[str, list[str]] = {}
        for task in generate_tasks(split, seed=seed):
            check_task(task)
            domain = task["snapshot"]
            folder = out / "examples" / domain
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{task['id']}.json").write_text(json.dumps(task, indent=2) + "\n")
            meta.setdefault(domain, []).append(task["id"])
        (out / f"{split}.json").write_text(json.dumps(meta, indent=2) + "\n")
        counts[split] = sum(len(ids) for ids in meta.values())
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to write the tasks in")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)
    counts = write_tasks(args.out, args.seed)
    print(f"wrote {counts['train']} train and {counts['heldout']} held-out tasks to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
