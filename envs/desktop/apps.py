"""Which installed app plays each role on the desktop (terminal, text editor, file manager).

The GTK apps come first because they publish an accessibility tree (menus, named buttons,
editor and terminal text); the X-only apps are the fallback on a machine without them. The root
menu and OSWorld's `open` step launch whatever this picks; the shipped tasks name the GTK apps.
"""

from __future__ import annotations

import shutil

__all__ = ["APPS", "APT_PACKAGES", "GTK_APPS", "OSWORLD_APPS", "app_command", "stand_in"]

APPS: dict[str, tuple[tuple[str, ...], ...]] = {
    "terminal": (("xfce4-terminal",), ("xterm",)),
    "editor": (("mousepad",), ("xedit",)),
    "file_manager": (("pcmanfm",), ("xfe",)),
}
# OSWorld's Ubuntu VM runs GNOME's apps, and its tasks launch them by name.
OSWORLD_APPS = {"gnome-terminal": "terminal", "gedit": "editor", "nautilus": "file_manager"}
GTK_APPS = tuple(choices[0][0] for choices in APPS.values())
# Everything the desktop env and its shipped tasks use, as Debian names it.
APT_PACKAGES = ("xvfb jwm xdotool x11-utils x11-apps bubblewrap dbus at-spi2-core python3-gi "
                "gir1.2-atspi-2.0 mousepad xfce4-terminal pcmanfm")


def app_command(role: str) -> list[str]:
    """The argv that starts the preferred installed app for `role` (the first choice when none
    is installed, so that the launch names what is missing)."""
    choices = APPS[role]
    return list(next((argv for argv in choices if shutil.which(argv[0])), choices[0]))


def stand_in(argv: list[str]) -> list[str]:
    """`argv` with an OSWorld GNOME app that is not installed swapped for this desktop's app of
    the same role (its arguments, files or folders, kept; gnome-terminal's `--` before a
    command becomes xfce4-terminal's `-x`)."""
    role = OSWORLD_APPS.get(argv[0]) if argv else None
    if role is None or shutil.which(argv[0]):
        return argv
    command, arguments = app_command(role), argv[1:]
    if argv[0] == "gnome-terminal" and "--" in arguments and command[0] == "xfce4-terminal":
        arguments = [("-x" if arg == "--" else arg) for arg in arguments]
    return [*command, *arguments]
