"""`make desktop-apps`: the Debian packages of every app OSWorld's task domains use, and
pyautogui for the desktop's python3.

OSWorld's set-up and post-config steps drive the screen with `python -c "import pyautogui; ..."`
(a ctrl+s before a document is scored, a click into a terminal). Debian does not package
pyautogui, so pip installs it, built for the desktop's own python3, into `apps.PYTHON_SITE`,
which every desktop process imports from. It happens here, once, never while an episode runs.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence

from envs.desktop.apps import (
    APT_PACKAGES,
    DESKTOP_PATH,
    OSWORLD_APT_PACKAGES,
    PYTHON_PACKAGES,
    PYTHON_SITE,
)
from envs.errors import EnvsError

__all__ = ["InstallError", "apt_commands", "desktop_python", "install_desktop_apps", "pip_command"]

logger = logging.getLogger(__name__)

Runner = Callable[[Sequence[str]], int]


class InstallError(EnvsError):
    """The desktop's apps could not be installed."""


def apt_commands() -> list[list[str]]:
    """Refresh Debian's package lists, then install the desktop's packages and OSWorld's apps."""
    packages = [*APT_PACKAGES.split(), *OSWORLD_APT_PACKAGES.split()]
    return [["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]]


def desktop_python() -> str:
    """The python3 the desktop's processes run: the first on the desktop's PATH."""
    python = shutil.which("python3", path=DESKTOP_PATH)
    if python is None:
        raise InstallError(f"no python3 on the desktop's PATH ({DESKTOP_PATH}); install "
                           "Debian's with `apt-get install python3 python3-pip`")
    return python


def pip_command(python: str) -> list[str]:
    """pip of `python` itself, so that what it builds fits that interpreter's version, into the
    desktop's own folder (replacing what an earlier install left there). The packages are
    listed whole, so pip pulls in no second Xlib or Pillow over Debian's."""
    return [python, "-m", "pip", "install", "--upgrade", "--no-deps", "--target", PYTHON_SITE,
            "--disable-pip-version-check", "--root-user-action=ignore", "--quiet",
            *PYTHON_PACKAGES]


def _run(command: Sequence[str]) -> int:
    # The desktop runs as an unprivileged uid, which must read everything installed here
    # whatever root's umask is.
    return subprocess.run(command, umask=0o022).returncode


def install_desktop_apps(apt: bool = True, run: Runner = _run) -> None:
    """Install the Debian packages (unless `apt` is False), then pyautogui for the desktop.

    Raises:
        InstallError: not root, or a command failed (its exit status and the command named).
    """
    if os.geteuid() != 0:
        raise InstallError("installing the desktop's apps writes to /usr; run it as root "
                           "(`sudo make desktop-apps`)")
    commands = apt_commands() if apt else []
    for command in [*commands, pip_command(desktop_python())]:
        logger.info("running %s", " ".join(command))
        status = run(command)
        if status != 0:
            hint = (" (Debian's python3 needs `apt-get install python3-pip` first)"
                    if "pip" in command else "")
            raise InstallError(f"`{' '.join(command)}` exited with status {status}{hint}")
