"""The AT-SPI accessibility tree of real GTK apps on the desktop: menus, editor and terminal text
and focus come through, and a scripted agent that reads nothing but that tree edits and saves a
file."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator

import pytest

from envs.desktop import DesktopEnv
from envs.desktop.accessibility import A11yNode, accessibility_missing, render_a11y
from envs.desktop.display import REQUIRED_PROGRAMS, DesktopSession
from envs.tool_calls import format_tool_call

GTK_APPS = ("mousepad", "xfce4-terminal")
_missing = [p for p in (*REQUIRED_PROGRAMS, *GTK_APPS) if not shutil.which(p)]
_why = accessibility_missing() or (
    f"programs missing: {', '.join(_missing)} (apt-get install -y --no-install-recommends "
    "mousepad xfce4-terminal)" if _missing else None)
pytestmark = pytest.mark.skipif(_why is not None, reason=f"no AT-SPI desktop here: {_why}")


def call(name: str, **arguments: object) -> str:
    return format_tool_call(name, arguments)


def read_until(session: DesktopSession, found: callable, timeout_s: float = 20.0) -> list[A11yNode]:
    """The tree once `found(nodes)` holds: apps register a moment after their window maps."""
    deadline = time.monotonic() + timeout_s
    while True:
        nodes = session.read_accessibility()
        if found(nodes) or time.monotonic() > deadline:
            return nodes
        time.sleep(0.3)


@pytest.fixture
def session() -> Iterator[DesktopSession]:
    with DesktopSession() as desktop:
        yield desktop


def test_gtk_apps_publish_menus_editor_and_terminal_text_and_focus(
    session: DesktopSession,
) -> None:
    (session.home / "notes.txt").write_text("hello world\n")
    session.launch(["mousepad", "/home/user/notes.txt"])
    session.launch(["xfce4-terminal", "--disable-server"])
    read_until(session, lambda nodes: {n.app for n in nodes} >= set(GTK_APPS))
    terminal = session.xdotool(["search", "--sync", "--onlyvisible", "--name", "^Terminal"])
    session.xdotool(["windowactivate", "--sync", terminal.stdout.split()[0]])
    session.xdotool(["type", "--delay", "20", "echo a11y-$((6*7))"])
    session.xdotool(["key", "Return"])
    nodes = read_until(session, lambda nodes: any(
        n.role == "terminal" and "a11y-42" in (n.text or "") for n in nodes))

    terminal_node = next(n for n in nodes if n.role == "terminal")
    assert "a11y-42" in terminal_node.text and "focused" in terminal_node.states
    editor = next(n for n in nodes if n.app == "mousepad" and n.role == "text")
    assert editor.text == "hello world" and "editable" in editor.states
    for app in GTK_APPS:
        menus = {n.name for n in nodes if n.app == app and n.role == "menu"}
        assert {"File", "Edit", "Help"} <= menus, (app, menus)
    text = render_a11y(nodes)
    assert 'app "mousepad"' in text and "| hello world" in text and "| a11y-42" in text
    assert re.search(r'terminal "Terminal" center \(\d+, \d+\) \[.*focused', text), text


def test_a_scripted_agent_edits_and_saves_from_the_accessibility_tree_alone() -> None:
    """Click the editor's text area, type, open the File menu and click Save: every coordinate
    comes from the AT-SPI part of the observation (none from the X listing or a screenshot)."""
    task = {
        "id": "gtk-editor-append", "snapshot": "editor", "related_apps": ["editor"],
        "instruction": "Add a last line 'buy milk' to the open file and save it.",
        "config": [
            {"type": "create_file", "parameters": {"path": "/home/user/notes.txt",
                                                   "content": "eggs\n"}},
            {"type": "launch", "parameters": {"command": ["mousepad", "/home/user/notes.txt"]}},
        ],
        "evaluator": {"func": "check_include_exclude",
                      "result": {"type": "vm_command_line", "command": "cat /home/user/notes.txt",
                                 "shell": True},
                      "expected": {"type": "rule", "rules": {"include": ["eggs\nbuy milk"]}}},
    }
    env = DesktopEnv(settle_s=0.5, max_turns=80)
    try:
        messages, _ = env.reset(options={"task": task})
        tree = a11y_part(messages[-1]["content"])
        tree = wait_for(env, tree, "| eggs")  # mousepad registers a moment after it maps
        env.step(call("CLICK", **center(tree, r"text")))
        env.step(call("HOTKEY", keys=["ctrl", "End"]))
        tree = a11y_part(env.step(call("TYPING", text="buy milk\n"))[0][-1]["content"])
        tree = wait_for(env, tree, "| buy milk")
        opened = a11y_part(env.step(call("CLICK", **center(tree, r'menu "File"')))[0][-1]["content"])
        opened = wait_for(env, opened, 'menu item "Save"')
        env.step(call("CLICK", **center(opened, r'menu item "Save"')))
        assert env.step(call("DONE"))[1] == 1.0
    finally:
        env.close()


def a11y_part(observation: str) -> str:
    return observation.partition("accessibility tree (AT-SPI):")[2]


def wait_for(env: DesktopEnv, tree: str, text: str, attempts: int = 30) -> str:
    """The AT-SPI part of the observation once it shows `text` (WAIT steps in between): apps
    and menus take a moment on a loaded machine."""
    for _ in range(attempts):
        if text in tree:
            return tree
        tree = a11y_part(env.step(call("WAIT"))[0][-1]["content"])
    raise AssertionError(f"{text!r} never appeared in:\n{tree}")


def center(tree: str, pattern: str) -> dict[str, int]:
    found = re.search(pattern + r" center \((\d+), (\d+)\)", tree)
    assert found, f"{pattern!r} not in:\n{tree}"
    return {"x": int(found[1]), "y": int(found[2])}

