"""Which installed app plays each role on the desktop (terminal, text editor, file manager),
and what `make desktop-apps` installs for OSWorld's task domains.

The GTK apps come first because they publish an accessibility tree (menus, named buttons,
editor and terminal text); the X-only apps are the fallback on a machine without them. The root
menu and OSWorld's `open` step launch whatever this picks; the shipped tasks name the GTK apps.
"""

from __future__ import annotations

import shutil
from pathlib import PurePosixPath

__all__ = [
    "APPS",
    "APT_PACKAGES",
    "BROWSER_STAND_INS",
    "DESKTOP_PATH",
    "FILE_VIEWERS",
    "GTK_APPS",
    "OSWORLD_APPS",
    "OSWORLD_APT_PACKAGES",
    "PROGRAM_PACKAGES",
    "PYTHON_PACKAGES",
    "PYTHON_SITE",
    "app_command",
    "missing_program_hint",
    "stand_in",
]

APPS: dict[str, tuple[tuple[str, ...], ...]] = {
    "terminal": (("xfce4-terminal",), ("xterm",)),
    "editor": (("mousepad",), ("xedit",)),
    "file_manager": (("pcmanfm",), ("xfe",)),
}
# OSWorld's Ubuntu VM runs GNOME's apps, and its tasks launch them by name.
OSWORLD_APPS = {"gnome-terminal": "terminal", "gedit": "editor", "nautilus": "file_manager"}
# Google Chrome is not a Debian package; Chromium takes the same flags and protocol.
BROWSER_STAND_INS = {"google-chrome": "chromium", "google-chrome-stable": "chromium"}
GTK_APPS = tuple(choices[0][0] for choices in APPS.values())
# Everything the desktop env and its shipped tasks use, as Debian names it.
APT_PACKAGES = ("xvfb jwm xdotool x11-utils x11-apps bubblewrap dbus at-spi2-core python3-gi "
                "gir1.2-atspi-2.0 mousepad xfce4-terminal pcmanfm")
# LibreOffice's GTK front end publishes its menus, cells and text over AT-SPI; its X-only one
# shows an agent nothing but the window title.
_LIBREOFFICE_PACKAGES = "libreoffice-calc libreoffice-writer libreoffice-impress libreoffice-gtk3"
# The apps OSWorld's task domains run, as Debian names them: LibreOffice, Chromium for Chrome,
# GIMP, VLC, Thunderbird, socat (the relay to Chrome's debugging port), wmctrl; what pyautogui
# needs of Debian's python3 (Xlib, Pillow, tkinter, and pip to install it), and `python` as a
# name for python3 (OSWorld's steps run `python -c ...`).
OSWORLD_APT_PACKAGES = (f"{_LIBREOFFICE_PACKAGES} chromium gimp vlc thunderbird evince socat "
                        "wmctrl python3-xlib python3-pil python3-tk python3-pip python-is-python3")
# The app OSWorld's `open` (xdg-open in its Ubuntu VM) starts for a file type that is neither a
# text file nor an office document: Ubuntu's Document Viewer, Evince, for PDFs (a GTK app, so
# the agent reads its pages' text over AT-SPI).
FILE_VIEWERS = {".pdf": "evince"}
# The Debian packages of the programs OSWorld's tasks start, for the error when one is missing.
PROGRAM_PACKAGES = {"soffice": _LIBREOFFICE_PACKAGES, "libreoffice": _LIBREOFFICE_PACKAGES,
                    "chromium": "chromium", "google-chrome": "chromium", "gimp": "gimp",
                    "vlc": "vlc", "thunderbird": "thunderbird", "socat": "socat",
                    "wmctrl": "wmctrl", "evince": "evince"}
# The PATH of every process on the desktop: its python3 is the first one there.
DESKTOP_PATH = "/usr/local/bin:/usr/bin:/bin"
# pyautogui is not packaged by Debian: pip installs it for the desktop's python3 into this
# folder, which the desktop's processes import from (PYTHONPATH). It lies under /usr, which the
# sandbox binds read-only, because a sandbox started by root runs as a uid that cannot enter
# root's home, where a cache would otherwise live.
PYTHON_SITE = "/usr/local/lib/agent-rl/desktop-python"
# pyautogui and what it needs on Linux, less what Debian packages (above): PyPI's Xlib for it,
# python3-xlib 0.15, cannot connect to a display without a ~/.Xauthority file.
PYTHON_PACKAGES = ("pyautogui==0.9.54", "pymsgbox==2.0.1", "pytweening==1.2.0",
                   "pyscreeze==1.0.1", "pygetwindow==0.0.9", "pyrect==0.2.0", "mouseinfo==0.1.3",
                   "pyperclip==1.11.0")


def app_command(role: str) -> list[str]:
    """The argv that starts the preferred installed app for `role` (the first choice when none
    is installed, so that the launch names what is missing)."""
    choices = APPS[role]
    return list(next((argv for argv in choices if shutil.which(argv[0])), choices[0]))


def stand_in(argv: list[str]) -> list[str]:
    """`argv` with an OSWorld GNOME app that is not installed swapped for this desktop's app of
    the same role (its arguments, files or folders, kept; gnome-terminal's `--` before a
    command becomes xfce4-terminal's `-x`), and Google Chrome for Chromium (its flags kept)."""
    browser = BROWSER_STAND_INS.get(argv[0]) if argv else None
    if browser is not None and not shutil.which(argv[0]) and shutil.which(browser):
        return [browser, *argv[1:]]
    role = OSWORLD_APPS.get(argv[0]) if argv else None
    if role is None or shutil.which(argv[0]):
        return argv
    command, arguments = app_command(role), argv[1:]
    if argv[0] == "gnome-terminal" and "--" in arguments and command[0] == "xfce4-terminal":
        arguments = [("-x" if arg == "--" else arg) for arg in arguments]
    return [*command, *arguments]


def missing_program_hint(program: str) -> str:
    """How to install `program` (a name or path a task starts): its Debian package where known,
    else the desktop's own packages."""
    package = PROGRAM_PACKAGES.get(PurePosixPath(program).name)
    if package is None:
        return f"the shipped tasks need `apt-get install {APT_PACKAGES}`"
    return (f"install it with `apt-get install -y --no-install-recommends {package}`, or every "
            "app of OSWorld's tasks with `make desktop-apps`")
