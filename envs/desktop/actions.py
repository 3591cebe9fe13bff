"""OSWorld's `computer_13` action space as tools, executed for real with xdotool.

Action names, parameters and key names follow OSWorld's `desktop_env/actions.py` (pyautogui key
names such as "enter", "ctrl", "pagedown"). Each action is a typed method whose docstring is its
tool schema; a bad action (a key that does not exist, a point off the screen) raises
`ActionError`, which the env hands back to the model as the tool's answer instead of crashing.
"""

from __future__ import annotations

import difflib
import string
import time
from collections.abc import Callable
from typing import Literal

from Xlib import XK

from envs.desktop.display import DesktopSession
from envs.tools import Tool, tool

__all__ = ["ACTION_NAMES", "KEYBOARD_KEYS", "ActionError", "Computer", "to_keysym"]

ACTION_NAMES = (
    "MOVE_TO",
    "CLICK",
    "MOUSE_DOWN",
    "MOUSE_UP",
    "RIGHT_CLICK",
    "DOUBLE_CLICK",
    "DRAG_TO",
    "SCROLL",
    "TYPING",
    "PRESS",
    "KEY_DOWN",
    "KEY_UP",
    "HOTKEY",
    "WAIT",
    "FAIL",
    "DONE",
)
ENDING_ACTIONS = ("DONE", "FAIL")

_NAMED_KEYS = {
    "enter": "Return",
    "return": "Return",
    "\n": "Return",
    "\r": "Return",
    "tab": "Tab",
    "\t": "Tab",
    "space": "space",
    " ": "space",
    "backspace": "BackSpace",
    "delete": "Delete",
    "del": "Delete",
    "esc": "Escape",
    "escape": "Escape",
    "insert": "Insert",
    "up": "Up",
    "down": "Down",
    "left": "Left",
    "right": "Right",
    "home": "Home",
    "end": "End",
    "pageup": "Prior",
    "pgup": "Prior",
    "pagedown": "Next",
    "pgdn": "Next",
    "ctrl": "Control_L",
    "ctrlleft": "Control_L",
    "ctrlright": "Control_R",
    "shift": "Shift_L",
    "shiftleft": "Shift_L",
    "shiftright": "Shift_R",
    "alt": "Alt_L",
    "altleft": "Alt_L",
    "altright": "Alt_R",
    "option": "Alt_L",
    "win": "Super_L",
    "winleft": "Super_L",
    "winright": "Super_R",
    "command": "Super_L",
    "capslock": "Caps_Lock",
    "numlock": "Num_Lock",
    "scrolllock": "Scroll_Lock",
    "printscreen": "Print",
    "prntscrn": "Print",
    "prtsc": "Print",
    "prtscr": "Print",
    "print": "Print",
    "pause": "Pause",
    "apps": "Menu",
    "clear": "Clear",
    "add": "KP_Add",
    "subtract": "KP_Subtract",
    "multiply": "KP_Multiply",
    "divide": "KP_Divide",
    "decimal": "KP_Decimal",
    "separator": "KP_Separator",
    "volumeup": "XF86AudioRaiseVolume",
    "volumedown": "XF86AudioLowerVolume",
    "volumemute": "XF86AudioMute",
    **{f"f{number}": f"F{number}" for number in range(1, 25)},
    **{f"num{digit}": f"KP_{digit}" for digit in range(10)},
}
KEYBOARD_KEYS: tuple[str, ...] = tuple(_NAMED_KEYS) + tuple(
    char for char in string.printable if char not in string.whitespace
)
_BUTTONS = {"left": "1", "middle": "2", "right": "3"}


def _click_options(num_clicks: int) -> list[str]:
    """xdotool waits `--delay` ms (default 100) even after a single click: only pause between
    clicks, long enough for a toolkit to see separate presses, short enough for a double."""
    return ["--repeat", str(num_clicks), "--delay", "0" if num_clicks == 1 else "40"]


class ActionError(ValueError):
    """An action that cannot be executed as given; the message tells the model how to fix it."""


def to_keysym(key: str) -> str:
    """The X keysym name xdotool needs for a pyautogui key name (case-insensitive for names)."""
    if not isinstance(key, str) or not key:
        raise ActionError(f"a key must be a non-empty string, got {key!r}")
    if len(key) == 1 and key not in _NAMED_KEYS:
        name = XK.keysym_to_string(ord(key)) if ord(key) < 0x100 else None
        if name is None:
            raise ActionError(f"key {key!r} cannot be pressed; use TYPING to enter such text")
        return name
    keysym = _NAMED_KEYS.get(key.lower())
    if keysym is None:
        close = difflib.get_close_matches(key.lower(), list(_NAMED_KEYS), n=3)
        hint = f" Did you mean {', '.join(repr(name) for name in close)}?" if close else ""
        raise ActionError(
            f"unknown key {key!r}. Use pyautogui key names such as 'enter', 'ctrl', 'alt', "
            f"'shift', 'tab', 'esc', 'backspace', 'f1' or a single character.{hint}"
        )
    return keysym


class Computer:
    """The 16 computer_13 actions on one desktop. `session` is swapped in at every reset."""

    def __init__(self, wait_s: float = 1.0, type_delay_ms: int = 2):
        self.session: DesktopSession | None = None
        self.wait_s = wait_s
        self.type_delay_ms = type_delay_ms
        self.ended_by: str | None = None

    def tools(self) -> dict[str, Tool]:
        """One tool per action, in OSWorld's order, named by its `action_type`."""
        methods: dict[str, Callable[..., str]] = {
            "MOVE_TO": self.move_to,
            "CLICK": self.click,
            "MOUSE_DOWN": self.mouse_down,
            "MOUSE_UP": self.mouse_up,
            "RIGHT_CLICK": self.right_click,
            "DOUBLE_CLICK": self.double_click,
            "DRAG_TO": self.drag_to,
            "SCROLL": self.scroll,
            "TYPING": self.typing,
            "PRESS": self.press,
            "KEY_DOWN": self.key_down,
            "KEY_UP": self.key_up,
            "HOTKEY": self.hotkey,
            "WAIT": self.wait,
            "FAIL": self.fail,
            "DONE": self.done,
        }
        return {name: tool(method, name=name) for name, method in methods.items()}

    def _xdotool(self, *args: str) -> None:
        if self.session is None:
            raise ActionError("the desktop is not running; call reset() first")
        result = self.session.xdotool(args)
        if result.returncode != 0:
            raise ActionError(f"xdotool {' '.join(args)} failed: {result.stderr.strip()}")

    def _point(self, x: float | None, y: float | None) -> list[str]:
        """xdotool words that move to (x, y) first, or nothing when both are omitted."""
        if x is None and y is None:
            return []
        if x is None or y is None:
            raise ActionError("give both x and y, or neither to act at the mouse position")
        assert self.session is not None
        width, height = self.session.width, self.session.height
        if not (0 <= x < width and 0 <= y < height):
            raise ActionError(
                f"point ({x:g}, {y:g}) is off the screen; x must be in [0, {width - 1}] and "
                f"y in [0, {height - 1}]"
            )
        return ["mousemove", str(round(x)), str(round(y))]

    def move_to(self, x: float, y: float) -> str:
        """Move the mouse pointer to a position on the screen.

        Args:
            x: Horizontal pixel position, 0 at the left edge.
            y: Vertical pixel position, 0 at the top edge.
        """
        self._xdotool(*self._point(x, y))
        return f"moved the mouse to ({x:g}, {y:g})"

    def click(
        self,
        button: Literal["left", "right", "middle"] = "left",
        x: float | None = None,
        y: float | None = None,
        num_clicks: int = 1,
    ) -> str:
        """Click a mouse button, at (x, y) if given, else where the mouse is.

        Args:
            button: Which button to click.
            x: Horizontal pixel position to click at (optional, with y).
            y: Vertical pixel position to click at (optional, with x).
            num_clicks: How many clicks, 1 to 3.
        """
        if num_clicks not in (1, 2, 3):
            raise ActionError(f"num_clicks must be 1, 2 or 3, got {num_clicks}")
        words = self._point(x, y)
        self._xdotool(*words, "click", *_click_options(num_clicks), _BUTTONS[button])
        where = f" at ({x:g}, {y:g})" if words else ""
        return f"clicked {button} x{num_clicks}{where}"

    def mouse_down(self, button: Literal["left", "right", "middle"] = "left") -> str:
        """Press and hold a mouse button where the mouse is.

        Args:
            button: Which button to press.
        """
        self._xdotool("mousedown", _BUTTONS[button])
        return f"pressed the {button} button"

    def mouse_up(self, button: Literal["left", "right", "middle"] = "left") -> str:
        """Release a held mouse button where the mouse is.

        Args:
            button: Which button to release.
        """
        self._xdotool("mouseup", _BUTTONS[button])
        return f"released the {button} button"

    def right_click(self, x: float | None = None, y: float | None = None) -> str:
        """Right-click at (x, y) if given, else where the mouse is.

        Args:
            x: Horizontal pixel position (optional, with y).
            y: Vertical pixel position (optional, with x).
        """
        self._xdotool(*self._point(x, y), "click", *_click_options(1), "3")
        return "right-clicked"

    def double_click(self, x: float | None = None, y: float | None = None) -> str:
        """Double-click the left button at (x, y) if given, else where the mouse is.

        Args:
            x: Horizontal pixel position (optional, with y).
            y: Vertical pixel position (optional, with x).
        """
        self._xdotool(*self._point(x, y), "click", *_click_options(2), "1")
        return "double-clicked"

    def drag_to(self, x: float, y: float) -> str:
        """Drag with the left button held from the mouse position to (x, y).

        Args:
            x: Horizontal pixel position to drop at.
            y: Vertical pixel position to drop at.
        """
        target = self._point(x, y)
        assert self.session is not None
        start = self.session.xdotool(["getmouselocation", "--shell"]).stdout
        position = dict(line.split("=", 1) for line in start.split() if "=" in line)
        middle_x = (int(position.get("X", x)) + round(x)) // 2
        middle_y = (int(position.get("Y", y)) + round(y)) // 2
        # The intermediate motion event makes toolkits see a drag, not a click.
        self._xdotool(
            "mousedown",
            "1",
            "mousemove",
            str(middle_x),
            str(middle_y),
            "sleep",
            "0.05",
            *target,
            "sleep",
            "0.05",
            "mouseup",
            "1",
        )
        return f"dragged to ({x:g}, {y:g})"

    def scroll(self, dx: int, dy: int) -> str:
        """Scroll the mouse wheel where the mouse is: dy > 0 up, dy < 0 down, dx > 0 right.

        Args:
            dx: Horizontal scroll clicks (positive scrolls right).
            dy: Vertical scroll clicks (positive scrolls up).
        """
        words: list[str] = []
        for amount, positive, negative in ((dy, "4", "5"), (dx, "7", "6")):
            if amount:
                clicks = min(abs(amount), 50)
                words += [
                    "click",
                    "--repeat",
                    str(clicks),
                    "--delay",
                    "5",
                    positive if amount > 0 else negative,
                ]
        if not words:
            raise ActionError("dx and dy are both 0: nothing to scroll")
        self._xdotool(*words)
        return f"scrolled dx={dx} dy={dy}"

    def typing(self, text: str) -> str:
        """Type text with the keyboard into the focused window ("\\n" presses Enter).

        Args:
            text: The text to type.
        """
        if not text:
            raise ActionError("text is empty: nothing to type")
        # xdotool types "\n" as Linefeed, which only terminals take for Enter: send Return.
        lines = text.split("\n")
        for index, line in enumerate(lines):
            if line:
                self._xdotool("type", "--delay", str(self.type_delay_ms), "--", line)
            if index < len(lines) - 1:
                self._xdotool("key", "--delay", "0", "Return")
        return f"typed {len(text)} character(s)"

    def press(self, key: str) -> str:
        """Press and release one key, e.g. "enter", "tab", "esc", "f2", "a".

        Args:
            key: A pyautogui key name or a single character.
        """
        self._xdotool("key", "--clearmodifiers", "--delay", "0", to_keysym(key))
        return f"pressed {key}"

    def key_down(self, key: str) -> str:
        """Press and hold one key.

        Args:
            key: A pyautogui key name or a single character.
        """
        self._xdotool("keydown", to_keysym(key))
        return f"holding {key}"

    def key_up(self, key: str) -> str:
        """Release a held key.

        Args:
            key: A pyautogui key name or a single character.
        """
        self._xdotool("keyup", to_keysym(key))
        return f"released {key}"

    def hotkey(self, keys: list[str]) -> str:
        """Press a key combination, e.g. ["ctrl", "s"]: all keys down in order, then up.

        Args:
            keys: Key names, modifiers first.
        """
        if not keys:
            raise ActionError('keys is empty; give a combination such as ["ctrl", "c"]')
        combination = "+".join(to_keysym(key) for key in keys)
        self._xdotool("key", "--clearmodifiers", "--delay", "0", combination)
        return f"pressed {'+'.join(keys)}"

    def wait(self) -> str:
        """Wait a moment, for an app to open or finish its work."""
        time.sleep(self.wait_s)
        return f"waited {self.wait_s:g} s"

    def fail(self) -> str:
        """Declare that the task cannot be done. Ends the episode."""
        self.ended_by = "FAIL"
        return "episode ended: task declared infeasible"

    def done(self) -> str:
        """Declare that the task is done. Ends the episode; the final state is then checked."""
        self.ended_by = "DONE"
        return "episode ended: task declared done"
