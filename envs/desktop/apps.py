"""Which installed app plays each role on the desktop (terminal, text editor, file manager).

The GTK apps come first because they publish an accessibility tree (menus, named buttons,
editor and terminal text); the X-only apps are the fallback on a machine without them. The root
menu and OSWorld's `open` step launch whatever this picks; the shipped tasks name the GTK apps.
"""

from __future__ import annotations

import shutil

__all__ = ["APPS", "APT_PACKAGES", "GTK_APPS", "app_command"]

APPS: dict[str, tuple[tuple[str, ...], ...]] = {
    "terminal": (("xfce4-terminal",), ("xterm",)),
    "editor": (("mousepad",), ("xedit",)),
    "file_manager": (("pcmanfm",), ("xfe",)),
}
GTK_APPS = tuple(choices[0][0] for choices in APPS.values())
# Everything the desktop env and its shipped tasks use, as Debian names it.
APT_PACKAGES = ("xvfb jwm xdotool x11-utils x11-apps bubblewrap dbus at-spi2-core python3-gi "
                "gir1.2-atspi-2.0 mousepad xfce4-terminal pcmanfm")


def app_command(role: str) -> list[str]:
    """The argv that starts the preferred installed app for `role` (the first choice when none
    is installed, so that the launch names what is missing)."""
    choices = APPS[role]
    return list(next((argv for argv in choices if shutil.which(argv[0])), choices[0]))
