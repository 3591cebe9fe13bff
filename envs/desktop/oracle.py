"""A scripted oracle for generated desktop tasks: a policy that reads the screen as a model would.

`DesktopOracle(task)` solves an instance of `envs.desktop.generate` from its parameters and the
observation text alone: every click is placed from the AT-SPI part of the last screen (a node by
role and name or text: `menu "File"`, `push button "OK"`, the `icon` whose text is `reports`) or,
for window-manager title bars and X-only apps, from the X listing's button centres. It waits
(the WAIT action) for what it needs to see: the shell prompt after a command, the editor's title
without the `*` of unsaved changes, the new folder's icon. No coordinate is written in a
solution. Its turns are tool calls in the text format the model writes
(`envs.tool_calls.format_tool_call`), so its episodes are demonstrations for SFT
(`agent_rl.learn.demonstrations` asks the env for `oracle_policy`).

A solution is a list of steps: `Await` (a regex that must hold on the screen), `Click` (an
AT-SPI node), `TitleButton` (a window's title-bar button) and plain tool calls. One turn holds
at most one step that reads the screen, first, then the plain calls after it: a step that reads
the screen reads the one its turn's actions left behind.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envs.desktop.generate import HOME
from envs.desktop.tasks import task_from_row
from envs.spaces import Message
from envs.tool_calls import format_tool_call

__all__ = ["Await", "Click", "DesktopOracle", "OracleError", "SOLUTIONS", "TitleButton",
           "button_center", "find_in_tree", "solution"]

TREE_HEADER = "accessibility tree (AT-SPI):"
MAX_WAITS = 15  # WAIT turns the oracle spends on one step before it gives up with FAIL


class OracleError(ValueError):
    """A task the oracle cannot solve: not a generated one, or of a kind it has no script for."""


@dataclass(frozen=True)
class Await:
    """Wait until the screen's text matches the regex `pattern` (or no longer does)."""

    pattern: str
    present: bool = True


@dataclass(frozen=True)
class Click:
    """Click the centre of the first AT-SPI node with this role, and this name or a line of
    text, that the screen lists."""

    role: str
    name: str | None = None
    text: str | None = None
    double: bool = False


@dataclass(frozen=True)
class TitleButton:
    """Click a window's title-bar button where the X listing puts it (the window manager's
    decorations are not AT-SPI objects, and X-only apps have no tree)."""

    window: str
    button: str


Step = Await | Click | TitleButton | str

_NODE = re.compile(r'^\s*(?P<role>[a-z ]+?)(?: "(?P<name>.*)")? center \((?P<x>\d+), (?P<y>\d+)\)')


def call(name: str, **arguments: Any) -> str:
    return format_tool_call(name, arguments)


def find_in_tree(screen: str, click: Click) -> tuple[int, int] | None:
    """Where the AT-SPI part of the screen text puts the node `click` names, or None."""
    lines = screen.partition(TREE_HEADER)[2].splitlines()
    for index, line in enumerate(lines):
        node = _NODE.match(line)
        if node is None or node["role"] != click.role or click.name not in (None, node["name"]):
            continue
        texts = [text.strip()[2:] for text in
                 itertools.takewhile(lambda text: text.strip().startswith("|"), lines[index + 1:])]
        if click.text is None or click.text in texts:
            return int(node["x"]), int(node["y"])
    return None


def button_center(screen: str, window: str, button: str) -> tuple[int, int] | None:
    """Where the X listing puts a window's title-bar button, or None."""
    listing = screen.partition(TREE_HEADER)[0]
    block = re.search(rf'^\s*\[\d+\] window "{re.escape(window)}".*(?:\n\s+\[\d+\.\d+\].*)*',
                      listing, re.MULTILINE)
    if block is None:
        return None
    match = re.search(rf'button "{re.escape(button)}" at .*? center \((\d+), (\d+)\)', block[0])
    return (int(match[1]), int(match[2])) if match else None


def place(step: Await | Click | TitleButton, screen: str) -> str | None:
    """The call a screen-reading step makes on this screen ("" for a met Await), or None when
    the screen does not show what it needs yet."""
    if isinstance(step, Await):
        return "" if bool(re.search(step.pattern, screen, re.MULTILINE)) == step.present else None
    if isinstance(step, Click):
        where = find_in_tree(screen, step)
    else:
        where = button_center(screen, step.window, step.button)
    if where is None:
        return None
    return call("DOUBLE_CLICK" if getattr(step, "double", False) else "CLICK", x=where[0], y=where[1])


def command(line: str) -> list[Step]:
    """Type a shell command into the terminal once its prompt shows, then wait for the prompt
    after it: keystrokes sent before the shell reads them would be lost."""
    ran = rf"^\s*\| \$ {re.escape(line)}$(\n\s*\|.*$)*?\n\s*\| \$$"
    return [Await(r"^\s*\| \$$"), Click("terminal"), call("TYPING", text=line + "\n"), Await(ran)]


def saved(file: str) -> Await:
    """Mousepad marks unsaved changes with a * before the title."""
    return Await(f'^\\s*frame "~/{re.escape(file)} - Mousepad"')


def edit(file: str, first_line: str | None, *keys: str) -> list[Step]:
    """Click into the editor's text (found by a line of it), run the edit, save with Ctrl+S and
    wait until the title says it is saved."""
    return [Click("text", text=first_line), *keys, call("HOTKEY", keys=["ctrl", "s"]), saved(file)]


def create_in_file_manager(kind: str, name: str) -> list[Step]:
    """File > Create New... > `kind`, then the new name in pcmanfm's dialog, Enter for OK, and
    wait for the new icon."""
    return [Click("menu", "File"), Click("menu", "Create New..."), Click("menu item", kind),
            Click("text", text="New"), call("HOTKEY", keys=["ctrl", "a"]),
            call("TYPING", text=name + "\n"),
            Await(rf"^\s*icon center \(\d+, \d+\).*\n\s*\| {re.escape(name)}$")]


def _window_gone(title: str) -> Await:
    return Await(rf'window "{re.escape(title)}"', present=False)


SOLUTIONS: dict[str, Callable[[dict[str, Any]], list[Step]]] = {
    "make-folder": lambda p: command(f"mkdir ~/{p['folder']}"),
    "write-line": lambda p: command(f"echo '{p['text']}' > ~/{p['file']}"),
    "rename-file": lambda p: command(f"mv ~/{p['source']} ~/{p['target']}"),
    "count-lines": lambda p: command(f"wc -l < ~/{p['file']} > ~/{p['out']}"),
    "sort-lines": lambda p: command(f"sort ~/{p['file']} > ~/{p['out']}"),
    "delete-by-extension": lambda p: command(f"rm ~/{p['folder']}/*.{p['extension']}"),
    "copy-folder": lambda p: command(f"mkdir -p ~/{p['backup']} && cp -r ~/{p['folder']} "
                                     f"~/{p['backup']}/"),
    "make-executable": lambda p: command(f"chmod +x ~/{p['script']}"),
    "append-line": lambda p: edit(p["file"], p["lines"][0], call("HOTKEY", keys=["ctrl", "End"]),
                                  call("TYPING", text=p["new"] + "\n")),
    "insert-header": lambda p: edit(p["file"], p["lines"][0], call("HOTKEY", keys=["ctrl", "Home"]),
                                    call("TYPING", text=p["header"] + "\n")),
    "replace-first-line": lambda p: edit(
        p["file"], f"TODO: {p['lines'][0]}", call("HOTKEY", keys=["ctrl", "Home"]),
        call("HOTKEY", keys=["shift", "End"]), call("TYPING", text=f"DONE: {p['lines'][0]}")),
    "write-greeting": lambda p: edit(p["file"], None, call("TYPING", text=p["text"])),
    "empty-file": lambda p: edit(p["file"], p["lines"][0], call("HOTKEY", keys=["ctrl", "a"]),
                                 call("PRESS", key="delete")),
    "new-folder": lambda p: create_in_file_manager("Folder", p["folder"]),
    "new-file": lambda p: create_in_file_manager("Empty File", p["file"]),
    "open-folder": lambda p: [Click("icon", text=p["target"], double=True),
                              Await(rf"\| {re.escape(HOME)}/{re.escape(p['target'])}$")],
    "close-window": lambda p: [TitleButton(p["target"], "close"), _window_gone(p["target"])],
    "maximize-window": lambda p: [TitleButton(p["target"], "maximize"),
                                  Await(rf'window "{re.escape(p["target"])}" .*maximized_vert')],
    "close-all-windows": lambda p: [step for app in p["apps"]
                                    for step in (TitleButton(app, "close"), _window_gone(app))],
}


def solution(task: dict[str, Any]) -> list[Step]:
    """The steps that solve a generated task, ending with DONE."""
    generator = task.get("generator")
    if not isinstance(generator, dict) or generator.get("kind") not in SOLUTIONS:
        kind = generator.get("kind") if isinstance(generator, dict) else None
        raise OracleError(f"task {task.get('id')!r} is not a generated desktop task the oracle "
                          f"knows (kind {kind!r}; known: {', '.join(SOLUTIONS)})")
    return [*SOLUTIONS[generator["kind"]](generator["params"]), call("DONE")]


def _screen(messages: list[Message]) -> str:
    """The text of the last message: the screen listing (text parts of a content list)."""
    if not messages:
        return ""
    content = messages[-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text", "") for part in content if part.get("type") == "text")


class DesktopOracle:
    """A policy (conversation -> next assistant turn) that solves one generated task.

    Each turn starts with the next screen-reading step: an `Await` that holds is passed, a
    `Click` or `TitleButton` found on the screen becomes a click; the plain calls after it join
    the turn. When the screen does not show what the step needs, the turn is WAIT; after
    `max_waits` of those in a row the oracle gives up with FAIL (the episode then scores 0, and
    the demonstration maker drops it).
    """

    def __init__(self, task: dict[str, Any], max_waits: int = MAX_WAITS):
        self.task = task_from_row(task)
        self.steps = solution(self.task)
        self.position = 0
        self.max_waits = max_waits
        self.waits = 0

    def __call__(self, messages: list[Message]) -> str:
        screen = _screen(messages)
        calls: list[str] = []
        while self.position < len(self.steps):
            step = self.steps[self.position]
            if isinstance(step, str):
                calls.append(step)
                self.position += 1
                continue
            if calls:  # it reads the screen this turn's calls will leave
                break
            placed = place(step, screen)
            if placed is None:
                self.waits += 1
                if self.waits > self.max_waits:
                    self.position = len(self.steps)
                    return call("FAIL")
                return call("WAIT")
            self.waits = 0
            self.position += 1
            if placed:
                calls.append(placed)
        if not calls:
            raise OracleError(f"the oracle's script for {self.task['id']!r} has ended; the "
                              "episode should have ended with its DONE")
        return "\n".join(calls)

