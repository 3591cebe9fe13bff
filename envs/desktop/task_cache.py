"""The episode's task cache: OSWorld's per-task `cache_dir`, where set-up steps and getters leave
files for the evaluator. Its own module so that set-up steps, app getters and the evaluator
share it without importing one another."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from envs.desktop.display import DesktopSession

__all__ = ["cache_file_name", "task_cache_dir"]


def task_cache_dir(session: DesktopSession) -> Path:
    """The episode's counterpart of OSWorld's per-task `cache_dir`: where `cloud_file` leaves
    the expected files and `cache_file` reads from. It lies on the host beside the episode's
    folders, out of the desktop's reach."""
    folder = session.root / "task-cache"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def cache_file_name(dest: Any) -> str:
    """`dest` as a file name in the task cache: its last part, so no name leaves the folder."""
    name = PurePosixPath(str(dest)).name
    if name in ("", ".", ".."):
        raise ValueError(f"{dest!r} is not a file name; a getter's 'dest' names the file the "
                         "evaluator saves, such as 'expected.xlsx'")
    return name
