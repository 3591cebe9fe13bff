"""Prints the desktop's AT-SPI accessibility tree as JSON lines, one per accessible.

Not imported by the package: `envs.desktop.accessibility` runs it with Debian's python3 (which
has the AT-SPI GObject bindings; the project's venv has not) inside the episode's sandbox,
because the accessibility bus only accepts clients of the apps' own user namespace. Each line:
{"app", "depth", "role", "name", "states", "x", "y", "w", "h"} plus "text" for text-bearing
widgets (editor buffers, terminals, labels); the walk is bounded in nodes, depth
and time so a hung app cannot stall a step.
"""

import json
import sys
import time

import gi

gi.require_version("Atspi", "2.0")
from gi.repository import Atspi  # noqa: E402

MAX_NODES, MAX_DEPTH, MAX_CHILDREN, TIME_LIMIT_S, MAX_TEXT = 3000, 24, 200, 8.0, 2000
KEPT_STATES = {"focused", "active", "selected", "checked", "pressed", "editable", "expanded",
               "showing", "sensitive", "modal"}
OFF_SCREEN = -(2**31)

start = time.monotonic()
seen = 0


def emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")


def text_of(node: Atspi.Accessible) -> str | None:
    if "Text" not in node.get_interfaces():
        return None
    count = Atspi.Text.get_character_count(node)
    text = Atspi.Text.get_text(node, max(0, count - 100_000), count)
    # Terminals pad every line with spaces; the end (the prompt, the newest output) matters most.
    text = "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")
    return text[-MAX_TEXT:] or None


def walk(node: Atspi.Accessible, app: str, depth: int) -> None:
    global seen
    if seen >= MAX_NODES or time.monotonic() - start > TIME_LIMIT_S:
        return
    seen += 1
    try:
        states = {Atspi.StateType(s).value_nick for s in node.get_state_set().get_states()}
        record = {"app": app, "depth": depth, "role": node.get_role_name(),
                  "name": (node.get_name() or "").strip(),
                  "states": sorted(states & KEPT_STATES)}
        box = node.get_extents(Atspi.CoordType.SCREEN)
        if box.x != OFF_SCREEN and box.width > 1 and box.height > 1:
            record.update(x=box.x, y=box.y, w=box.width, h=box.height)
        if text := text_of(node):
            record["text"] = text
        count = node.get_child_count()
    except Exception as error:  # an app that died mid-walk: note it, keep the others
        emit({"app": app, "depth": depth, "error": str(error)[:200]})
        return
    emit(record)
    # Closed menus and hidden panels hold hundreds of nodes nobody can click. GTK2 leaves
    # "showing" off the items of an open menu, so a box on screen counts as shown too.
    if depth >= MAX_DEPTH or (depth > 1 and "showing" not in states and "x" not in record):
        return
    for index in range(min(count, MAX_CHILDREN)):
        child = node.get_child_at_index(index)
        if child is not None:
            walk(child, app, depth + 1)


Atspi.init()
Atspi.set_timeout(1000, 3000)
desktop = Atspi.get_desktop(0)
for index in range(desktop.get_child_count()):
    application = desktop.get_child_at_index(index)
    if application is not None:
        walk(application, application.get_name() or "?", 0)
