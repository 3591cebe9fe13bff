"""GIMP on the desktop: when its window is ready, and the getter that reads its profile.

GIMP 2.10 keeps its settings in `~/.config/GIMP/2.10/` (`gimprc`, `sessionrc`,
`action-history`, ...), made on its first start from `/etc/gimp/2.0` (which the sandbox binds
for it). Each episode's home is new, so every episode's GIMP starts as on first use: a
"GIMP Startup" splash while it registers its plug-ins, then its main window, titled "GNU Image
Manipulation Program", or "[image] (...) - GIMP" with an image open.

OSWorld's GIMP tasks quit GIMP with ctrl+q in a post-config step and read a profile file half a
second later; GIMP writes those files as it exits, which on a loaded machine takes longer, so
`get_gimp_config_file` waits (boundedly) for GIMP to be gone first.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from envs.desktop.display import VM_HOME

if TYPE_CHECKING:
    from envs.desktop.evaluate import EvalContext

__all__ = ["CONFIG_DIR", "EXIT_TIMEOUT_S", "START_TIMEOUT_S", "get_gimp_config_file",
           "is_gimp", "is_main_window"]

CONFIG_DIR = f"{VM_HOME}/.config/GIMP/2.10"
# A first start registers every plug-in: well over the few seconds other apps need on a loaded
# two-core machine.
START_TIMEOUT_S = 90.0
EXIT_TIMEOUT_S = 30.0
_SPLASH_TITLES = frozenset({"GIMP Startup"})


def is_gimp(argv: list[str]) -> bool:
    """Whether `argv` starts GIMP (`gimp`, `gimp-2.10`)."""
    return bool(argv) and PurePosixPath(argv[0]).name.startswith("gimp")


def is_main_window(app: str, title: str) -> bool:
    """Whether a window (WM_CLASS class, title) is GIMP's main or image window, not its
    splash."""
    return app == "Gimp" and title not in _SPLASH_TITLES and (
        title == "GNU Image Manipulation Program" or title.endswith("GIMP"))


def get_gimp_config_file(context: EvalContext, config: dict[str, Any]) -> str | None:
    """OSWorld's `gimp_config_file`: a host copy of `~/.config/GIMP/2.10/<file_name>`, or None
    when GIMP never wrote it. `dest` names OSWorld's local copy; ours keeps the file's name."""
    name = PurePosixPath(str(config["file_name"])).name
    context.session.wait_for_exit("^gimp", EXIT_TIMEOUT_S)
    copy = context.session.copy_out(f"{CONFIG_DIR}/{name}")
    return str(copy) if copy is not None else None
