"""The accessibility tree of the desktop's apps, read through AT-SPI as OSWorld reads it.

GTK and Qt apps publish their widgets (menus, named buttons, editor buffers, terminal text, the
focused element) on an accessibility bus that the session's D-Bus starts on demand. Every
sandboxed app runs in its own user namespace mapping `user` to the host's root, so the buses run
in such a sandbox too (a host-side daemon would see each client as uid 0 claiming 1000), and
their sockets live in the episode's shared /tmp. The reader (`a11y_reader.py`) runs the same
way, with Debian's python3 and its AT-SPI bindings. Apps without AT-SPI (xlogo, xclock, the
X-only fallbacks xterm and xedit) still appear in the X window listing (`envs.desktop.observe`).
"""

from __future__ import annotations

import functools
import glob
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["A11yNode", "SESSION_ENV", "accessibility_missing", "parse_tree", "render_a11y"]

READER = Path(__file__).with_name("a11y_reader.py")
SYSTEM_PYTHON = "/usr/bin/python3"
BUS_SOCKET = ".session-bus"  # under the episode's /tmp
# What each sandboxed app needs to find the buses: the session bus starts the accessibility
# bus, whose socket goes under XDG_RUNTIME_DIR; GTK2 apps load the bridge only as a module.
SESSION_ENV = {
    "DBUS_SESSION_BUS_ADDRESS": f"unix:path=/tmp/{BUS_SOCKET}",
    "XDG_RUNTIME_DIR": "/tmp/.runtime",
    "GTK_MODULES": "gail:atk-bridge",
}
# Roles worth a line even without a name or text: where an agent types or toggles.
_INTERACTIVE = {"push button", "toggle button", "check box", "radio button", "text", "entry",
                "password text", "terminal", "combo box", "spin button", "slider"}
_SKIPPED_STATES = {"showing", "sensitive"}  # nearly every listed node has them


@functools.cache
def reader_source() -> str:
    """The reader's text, fed to the sandbox's python3 on stdin: read once, not per step."""
    return READER.read_text()


def accessibility_missing() -> str | None:
    """Why AT-SPI cannot run here (a missing program or binding), or None when it can."""
    if shutil.which("dbus-daemon") is None:
        return "dbus-daemon is not on PATH (apt-get install dbus)"
    if not Path("/usr/libexec/at-spi-bus-launcher").exists():
        return "at-spi-bus-launcher is missing (apt-get install at-spi2-core)"
    if not Path(SYSTEM_PYTHON).exists() or not glob.glob(
            "/usr/lib/*/girepository-1.0/Atspi-2.0.typelib"):
        return "Debian's python3 with the AT-SPI bindings is missing " \
               "(apt-get install python3-gi gir1.2-atspi-2.0)"
    return None


@dataclass
class A11yNode:
    """One accessible: its role, name, box (screen coordinates; None when off screen), states
    and text, with its depth in its app's tree."""

    app: str
    depth: int
    role: str
    name: str
    states: list[str] = field(default_factory=list)
    box: tuple[int, int, int, int] | None = None
    text: str | None = None

    @property
    def center(self) -> tuple[int, int] | None:
        if self.box is None:
            return None
        x, y, width, height = self.box
        return x + width // 2, y + height // 2


def parse_tree(output: str) -> list[A11yNode]:
    """The reader's JSON lines as nodes; accessibles that failed, and a last line cut short by a
    reader that died or timed out, are left out."""
    nodes = []
    for line in output.splitlines():
        try:
            record: dict[str, Any] = json.loads(line)
        except ValueError:
            continue
        if "error" in record:
            continue
        box = (record["x"], record["y"], record["w"], record["h"]) if "x" in record else None
        nodes.append(A11yNode(record["app"], record["depth"], record["role"], record["name"],
                              record.get("states", []), box, record.get("text")))
    return nodes


def render_a11y(nodes: list[A11yNode], max_text_lines: int = 12) -> str:
    """The tree as indented lines: each app, then every on-screen node with a name, a text or
    a role one can act on, with its centre to click and its states; long texts keep their last
    lines (a terminal's newest output)."""
    lines = ["accessibility tree (AT-SPI):"]
    for node in nodes:
        if node.depth == 0:
            lines.append(f'  app "{node.app}"')
            continue
        wanted = node.name or node.text or node.role in _INTERACTIVE or "focused" in node.states
        if node.box is None or not wanted:
            continue
        indent = "    " + "  " * min(node.depth - 1, 8)
        label = f' "{node.name}"' if node.name else ""
        states = [s for s in node.states if s not in _SKIPPED_STATES]
        flags = f" [{', '.join(states)}]" if states else ""
        lines.append(f"{indent}{node.role}{label} center {node.center}{flags}")
        if node.text and node.text != node.name:
            text_lines = node.text.split("\n")[-max_text_lines:]
            lines.extend(f"{indent}  | {text}" for text in text_lines)
    return "\n".join(lines)
