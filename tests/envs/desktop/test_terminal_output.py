"""The `vm_terminal_output` getter, checked against OSWorld's `/terminal` semantics: the text of
the focused terminal in the active window of the terminal app, right-stripped, or None unless
exactly one such terminal shows; and one of OSWorld's os tasks that it scores, end to end."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from envs.desktop import DesktopEnv, file_cache
from envs.desktop.accessibility import A11yNode, accessibility_missing
from envs.desktop.coverage import GETTER_KEYS
from envs.desktop.display import REQUIRED_PROGRAMS
from envs.desktop.evaluate import GETTERS, terminal_output
from envs.desktop.oracle import Await, Click, command, find_in_tree
from envs.tool_calls import format_tool_call


def terminal_window(active: bool, focused: bool, text: str, app: str = "xfce4-terminal",
                    ) -> list[A11yNode]:
    return [A11yNode(app, 1, "frame", "Terminal - ", ["active"] if active else []),
            A11yNode(app, 4, "menu", "File"),
            A11yNode(app, 5, "terminal", "Terminal", ["focused"] if focused else [], text=text)]


def test_the_focused_terminal_of_the_active_window_is_read_right_stripped() -> None:
    assert GETTER_KEYS["vm_terminal_output"] == frozenset() and "vm_terminal_output" in GETTERS
    screen = terminal_window(active=True, focused=True, text="$ wc -l x\n54\n$   \n")
    assert terminal_output(screen) == "$ wc -l x\n54\n$"
    assert terminal_output(terminal_window(True, True, "$ ls", app="gnome-terminal-server")) == "$ ls"


def test_no_terminal_in_front_or_two_focused_ones_read_as_none() -> None:
    assert terminal_output([]) is None
    assert terminal_output(terminal_window(active=False, focused=True, text="$ ls")) is None
    assert terminal_output(terminal_window(active=True, focused=False, text="$ ls")) is None
    assert terminal_output(terminal_window(True, True, "$ ls", app="mousepad")) is None
    two = [*terminal_window(True, True, "$ a"), *terminal_window(True, True, "$ b")]
    assert terminal_output(two) is None


def test_a_terminal_outside_the_active_window_does_not_count() -> None:
    """The frame's subtree ends at the next node no deeper than the frame."""
    background = [A11yNode("xfce4-terminal", 1, "frame", "Terminal - ", []),
                  A11yNode("xfce4-terminal", 5, "terminal", "Terminal", ["focused"], text="$ b")]
    front = [A11yNode("xfce4-terminal", 1, "frame", "Terminal - ", ["active"])]
    assert terminal_output([*front, *background]) is None
    assert terminal_output([*background, *terminal_window(True, True, "$ a")]) == "$ a"


# OSWorld's os task 4127319a, unchanged (`tests/data/osworld_os/`): count the lines of the php
# files under ~/project and show the count in a terminal. Its setup.sh, which makes the project,
# is written here and served from the file cache; scored by `vm_terminal_output` and
# `check_include_exclude` ("54\n" in the terminal's text).
TASK = Path(__file__).parents[2] / "data" / "osworld_os" / "os" / (
    "4127319a-8b79-4410-b58a-7a151e15f3d7.json")
SETUP_SH = """#!/bin/bash
mkdir -p ~/project/src/lib ~/project/docs
for i in $(seq 20); do echo "echo $i;"; done > ~/project/index.php
for i in $(seq 24); do echo "\\$a[] = $i;"; done > ~/project/src/models.php
for i in $(seq 10); do echo "// $i"; done > ~/project/src/lib/util.php
for i in $(seq 7); do echo "line $i"; done > ~/project/docs/README.md
"""

_missing = [program for program in (*REQUIRED_PROGRAMS, "xfce4-terminal")
            if not shutil.which(program)]
if no_tree := accessibility_missing():
    _missing.append(no_tree)


def call(name: str, **arguments: object) -> str:
    return format_tool_call(name, arguments)


def play(env: DesktopEnv, task: dict, steps: list[Await | Click | str]) -> float:
    """Reset to `task`, run the steps (a screen to wait for, a node to click, a tool call),
    then DONE; the reward."""
    messages, _ = env.reset(options={"task": task})
    for step in steps:
        if isinstance(step, str):
            messages, *_ = env.step(step)
            continue
        for _ in range(20):
            screen = messages[-1]["content"]
            where = (find_in_tree(screen, step) if isinstance(step, Click)
                     else re.search(step.pattern, screen, re.MULTILINE))
            if where:
                break
            messages, *_ = env.step(call("WAIT"))
        else:
            raise AssertionError(f"{step} never showed on the screen:\n{screen}")
        if isinstance(step, Click):
            messages, *_ = env.step(call("CLICK", x=where[0], y=where[1]))
        elif step.pattern.startswith("menu item"):
            messages, *_ = env.step(call("CLICK", x=int(where[1]), y=int(where[2])))
    _, reward, terminated, _, info = env.step(call("DONE"))
    assert terminated and info.get("evaluation_error") is None, info
    return reward


@pytest.mark.slow
@pytest.mark.skipif(bool(_missing), reason=f"missing: {', '.join(_missing)} "
                    "(`make desktop-apps` installs the desktop's programs)")
def test_osworld_task_4127319a_scores_the_count_shown_in_a_terminal_1_and_a_no_op_0(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    task = json.loads(TASK.read_text())
    monkeypatch.setenv("AGENT_RL_HOME", str(tmp_path / "agent-rl-home"))
    (tmp_path / "setup.sh").write_text(SETUP_SH)
    for url in file_cache.task_urls(task):
        file_cache.add(url, tmp_path / "setup.sh")
    env = DesktopEnv(max_turns=60)
    try:
        assert play(env, task, []) == 0.0
        assert play(env, task, [
            call("CLICK", x=900, y=700, button="right"),
            Await(r'menu item "Terminal" at .* center \((\d+), (\d+)\)'),
            *command("cd ~/project"), *command("find . -name '*.php' | xargs cat | wc -l")]) == 1.0
    finally:
        env.close()
