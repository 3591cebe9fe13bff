"""The `vm_terminal_output` getter, checked against OSWorld's `/terminal` semantics: the text of
the focused terminal in the active window of the terminal app, right-stripped, or None unless
exactly one such terminal shows."""

from __future__ import annotations

from envs.desktop.accessibility import A11yNode
from envs.desktop.coverage import GETTER_KEYS
from envs.desktop.evaluate import GETTERS, terminal_output


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
