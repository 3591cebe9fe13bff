"""LibreOffice on the desktop: which documents it opens, and the profile it starts with.

OSWorld's `open` step is xdg-open, which hands spreadsheets to LibreOffice Calc, documents to
Writer and presentations to Impress; its tasks then find the window by title ("Book1.xlsx -
LibreOffice Calc") and save with ctrl+s before the file is scored. Each episode's home is new,
so LibreOffice would make a new profile and greet the agent with a tip-of-the-day dialog over
the document. The profile is seeded first instead: no first-start or tip dialog, no "what's
new" bar, no document recovery, and no question on saving in a non-ODF format, so ctrl+s on an
.xlsx saves it as .xlsx. (Some of OSWorld's post-config steps press Enter after ctrl+s to answer that
question with "Use Excel 2007-365!"; unasked, the Enter lands in the already saved document.)

After its window shows the file's title, LibreOffice goes on laying the window out for a moment,
and it takes the position it ends with from the next pointer motion only (the screen text
nudges the pointer for that, `observe.POSITION_FROM_MOTION`); `wait_until_laid_out` waits for
that moment to pass, so that the first screen places LibreOffice's widgets where they are.
"""

from __future__ import annotations

import time
from pathlib import PurePosixPath

from Xlib import Xatom, error

from envs.desktop.display import VM_HOME, DesktopSession
from envs.desktop.observe import Observer

__all__ = [
    "DOCUMENT_MODULES",
    "PROFILE_SETTINGS",
    "START_TIMEOUT_S",
    "is_libreoffice",
    "module_of",
    "open_command",
    "seed_profile",
    "wait_until_laid_out",
]

# The document types xdg-open gives LibreOffice, and the module each opens in.
DOCUMENT_MODULES = {
    **dict.fromkeys((".xlsx", ".xls", ".ods", ".csv"), "calc"),
    **dict.fromkeys((".docx", ".doc", ".odt", ".rtf"), "writer"),
    **dict.fromkeys((".pptx", ".ppt", ".odp"), "impress"),
}
_PROGRAMS = frozenset({"soffice", "libreoffice", "localc", "lowriter", "loimpress"})
_PROFILE = f"{VM_HOME}/.config/libreoffice/4/user/registrymodifications.xcu"
# A cold start on a loaded two-core machine takes well over the few seconds other apps need.
START_TIMEOUT_S = 60.0
# LibreOffice's layout after the title shows changes its windows' size hints a few times, each
# within half a second of the last on a loaded two-core machine; this long without a change
# means it is done, and a layout never takes longer than the timeout.
LAYOUT_QUIET_S = 1.0
LAYOUT_TIMEOUT_S = 10.0
# (configuration path, property, value) in LibreOffice's registry. The last version run is set
# above any release's, so that no "you are running version N for the first time" bar takes a
# row of the screen; no other setting reads it.
PROFILE_SETTINGS = (
    ("/org.openoffice.Office.Common/Misc", "FirstRun", "false"),
    ("/org.openoffice.Office.Common/Misc", "ShowTipOfTheDay", "false"),
    ("/org.openoffice.Office.Common/Save/Document", "WarnAlienFormat", "false"),
    ("/org.openoffice.Office.Recovery/RecoveryInfo", "Enabled", "false"),
    ("/org.openoffice.Office.Recovery/AutoSave", "Enabled", "false"),
    ("/org.openoffice.Setup/Office", "ooSetupInstCompleted", "true"),
    ("/org.openoffice.Setup/Product", "ooSetupLastVersion", "999.9"),
)


def module_of(path: str) -> str | None:
    """The LibreOffice module ("calc", "writer", "impress") that opens `path`, or None when
    LibreOffice does not open that file type."""
    return DOCUMENT_MODULES.get(PurePosixPath(path).suffix.lower())


def is_libreoffice(argv: list[str]) -> bool:
    """Whether `argv` starts LibreOffice."""
    return bool(argv) and PurePosixPath(argv[0]).name in _PROGRAMS


def open_command(path: str) -> list[str]:
    """What xdg-open runs for an office document (`libreoffice --calc %U` and kin), with no
    recovery of an earlier crash."""
    module = module_of(path)
    if module is None:
        raise ValueError(f"LibreOffice does not open {path!r}; it opens "
                         f"{', '.join(DOCUMENT_MODULES)}")
    return ["soffice", f"--{module}", "--norestore", path]


def _registry(settings: tuple[tuple[str, str, str], ...]) -> str:
    items = "\n".join(f'<item oor:path="{path}"><prop oor:name="{name}" oor:op="fuse">'
                      f"<value>{value}</value></prop></item>" for path, name, value in settings)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<oor:items xmlns:oor="http://openoffice.org/2001/registry" '
            'xmlns:xs="http://www.w3.org/2001/XMLSchema" '
            'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">\n'
            f"{items}\n</oor:items>\n")


def seed_profile(session: DesktopSession) -> None:
    """Give the episode's LibreOffice profile `PROFILE_SETTINGS`, unless it has a profile
    already (LibreOffice ran, and keeps its own settings)."""
    if session.read_file(_PROFILE) is None:
        session.write_file(_PROFILE, _registry(PROFILE_SETTINGS))


def _size_hints(observer: Observer) -> list[tuple[int, ...]]:
    """The WM_NORMAL_HINTS of LibreOffice's windows, which it sets as it lays them out."""
    hints = []
    for window in observer.client_windows():
        try:
            wm_class = window.get_wm_class()
            if not wm_class or not wm_class[1].startswith("libreoffice-"):
                continue
            prop = window.get_full_property(Xatom.WM_NORMAL_HINTS, Xatom.WM_SIZE_HINTS)
        except error.BadWindow:
            continue
        hints.append(tuple(prop.value) if prop is not None else ())
    return hints


def wait_until_laid_out(observer: Observer) -> None:
    """Return once LibreOffice's windows have kept their size hints for `LAYOUT_QUIET_S`
    (module docstring), or after `LAYOUT_TIMEOUT_S`."""
    deadline = time.monotonic() + LAYOUT_TIMEOUT_S
    last, changed_at = _size_hints(observer), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        hints = _size_hints(observer)
        if hints != last:
            last, changed_at = hints, time.monotonic()
        elif time.monotonic() - changed_at >= LAYOUT_QUIET_S:
            return
