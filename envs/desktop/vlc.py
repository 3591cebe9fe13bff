"""VLC on the desktop for OSWorld's VLC tasks: how it starts, its getters and its metrics.

OSWorld's VM runs VLC with its web interface on (port 8080, password `password`), and its
`vlc_playing_info` getter asks `http://VM:8080/requests/status.xml`. Here each sandbox has a
network namespace of its own, so VLC's loopback is not the evaluator's: `command` starts VLC
with the web interface on its own loopback and, in the same sandbox, socat relaying a unix
socket in the episode's `/tmp` (which every sandbox of the episode shares) to it; the getter
asks through that socket with curl, from another sandbox. The host's network is never shared.
`command` also turns off the first-start "Privacy and Network Access Policy" question, which
OSWorld's VM answered once. Both are command-line options, which VLC never saves to `vlcrc`,
so the settings the tasks check start at VLC's defaults.

VLC keeps its settings in `~/.config/vlc/vlcrc`, written when Preferences are saved and when
VLC quits after a change. OSWorld's tasks restart VLC with `pkill vlc` in a post-config step;
each sandbox sees only its own processes, so that `pkill` is the env's
(`DesktopSession.signal_programs`), and VLC quits as on any SIGTERM, saving its settings.

The metrics read `vlcrc` as OSWorld's do, line by line: for the `check_qt_*` family the last
line that holds `<option>=` wins, commented-out defaults (`#qt-bgcone=1`) included, and a
missing option reads as VLC's default.
"""

from __future__ import annotations

import logging
import shlex
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any
from xml.etree import ElementTree

from envs.desktop.display import VM_HOME
from envs.desktop.task_cache import task_cache_dir

if TYPE_CHECKING:
    from envs.desktop.evaluate import EvalContext

__all__ = [
    "CONFIG_PATH",
    "HTTP_SOCKET",
    "START_TIMEOUT_S",
    "VLC_GETTERS",
    "VLC_METRICS",
    "command",
    "is_vlc",
]

logger = logging.getLogger(__name__)

CONFIG_PATH = f"{VM_HOME}/.config/vlc/vlcrc"
HTTP_SOCKET = "/tmp/.vlc-http"  # in the episode's /tmp, shared by its sandboxes
HTTP_PORT = 8080  # OSWorld's
HTTP_PASSWORD = "password"  # OSWorld's
START_TIMEOUT_S = 30.0
VLC_OPTIONS = ("--no-qt-privacy-ask", "--extraintf=http", "--http-host=127.0.0.1",
               f"--http-port={HTTP_PORT}", f"--http-password={HTTP_PASSWORD}")


def is_vlc(argv: list[str]) -> bool:
    """Whether `argv` starts VLC."""
    return bool(argv) and PurePosixPath(argv[0]).name in ("vlc", "cvlc")


def command(argv: list[str]) -> list[str]:
    """`argv` (a VLC launch) as the desktop runs it: with `VLC_OPTIONS`, and socat relaying
    `HTTP_SOCKET` to the web interface in the same sandbox. VLC is exec'd, so it keeps its
    name for `pkill vlc`; the relay dies with the sandbox when VLC exits."""
    relay = (f"socat UNIX-LISTEN:{HTTP_SOCKET},fork,unlink-early,mode=600 "
             f"TCP:127.0.0.1:{HTTP_PORT} &")
    return ["sh", "-c", f"{relay} exec {shlex.quote(argv[0])} {' '.join(VLC_OPTIONS)} \"$@\"",
            "sh", *argv[1:]]


def get_vlc_config(context: EvalContext, config: dict[str, Any]) -> str | None:
    """OSWorld's `vlc_config`: a host copy of `~/.config/vlc/vlcrc`, or None when VLC never
    wrote one (OSWorld fails there; its metrics then score 0 here)."""
    copy = context.session.copy_out(CONFIG_PATH)
    return str(copy) if copy is not None else None


def get_vlc_playing_info(context: EvalContext, config: dict[str, Any]) -> str | None:
    """OSWorld's `vlc_playing_info`: VLC's `status.xml` from its web interface, saved in the
    task cache under `dest`; None when VLC does not answer (not running)."""

    result = context.session.run(
        ["curl", "--silent", "--fail", "--max-time", "5", "--unix-socket", HTTP_SOCKET,
         "--user", f":{HTTP_PASSWORD}", "http://localhost/requests/status.xml"], timeout_s=10)
    if result.returncode != 0 or not result.stdout:
        logger.warning("VLC's web interface did not answer (curl exited %d)", result.returncode)
        return None
    path = task_cache_dir(context.session) / PurePosixPath(str(config["dest"])).name
    path.write_text(result.stdout)
    return str(path)


def get_vm_screen_size(context: EvalContext, config: dict[str, Any]) -> dict[str, int]:
    """OSWorld's `vm_screen_size`: the screen's width and height in pixels."""
    return {"width": context.session.width, "height": context.session.height}


def get_vm_window_size(context: EvalContext, config: dict[str, Any]) -> dict[str, int] | None:
    """OSWorld's `vm_window_size`: the size of the first managed window one of whose WM_CLASS
    names is `app_class_name` (ignoring case), or None when there is none."""
    wanted = str(config["app_class_name"]).lower()
    for window in context.observer.client_windows():
        wm_class = window.get_wm_class()
        if wm_class and wanted in (name.lower() for name in wm_class):
            geometry = window.get_geometry()
            return {"width": geometry.width, "height": geometry.height}
    return None


def _read(path: str | None) -> str | None:
    if path is None:
        return None
    with open(path, "rb") as file:
        return file.read().decode("utf-8")


def _last_value(text: str, needle: str, default: str) -> str:
    """The value after the last `=` of the last line holding `needle`, else `default`."""
    value = default
    for line in text.split("\n"):
        if needle in line:
            value = line.split("=")[-1].strip()
    return value


def _expected_text(value: Any) -> Any:
    return str(value) if isinstance(value, int) else value


def _check_option(path: str | None, option: str, default: str, expected: Any) -> float:
    text = _read(path)
    if text is None:
        return 0.0
    return float(_last_value(text, f"{option}=", default) == _expected_text(expected))


def check_qt_bgcone(config_path: str | None, rule: dict[str, Any]) -> float:
    """1 when `qt-bgcone` (default 1: VLC's cone shows) is `expected_qt_bgcone`."""
    return _check_option(config_path, "qt-bgcone", "1", rule["expected_qt_bgcone"])


def check_qt_max_volume(config_path: str | None, rule: dict[str, Any]) -> float:
    """1 when `qt-max-volume` (default 125) is `expected_qt_max_volume`."""
    return _check_option(config_path, "qt-max-volume", "125", rule["expected_qt_max_volume"])


def check_qt_minimal_view(config_path: str | None, rule: dict[str, Any]) -> float:
    """1 when `qt-minimal-view` (default 0) is `expected_qt_minimal_view`."""
    return _check_option(config_path, "qt-minimal-view", "0", rule["expected_qt_minimal_view"])


def check_one_instance_when_started_from_file(config_path: str | None, rule: dict[str, Any]
                                              ) -> float:
    """1 when `one-instance-when-started-from-file` (default 1) is the expected value."""
    return _check_option(config_path, "one-instance-when-started-from-file", "1",
                         rule["expected_one_instance_when_started_from_file"])


_DEFAULT_SLIDER_COLOURS = "153;210;153;20;210;20;255;199;15;245;39;29"


def check_qt_slider_colours(config_path: str | None, rule: dict[str, Any]) -> float:
    """`qt-slider-colours` (`r;g;b;...`, four colours): with rule `type` "match", 1 when it is
    `expected_qt_slider_colours`; with "blackish", 1 when every channel of every colour is
    under 100. As in OSWorld, any line that merely mentions the option counts, and a value
    that does not parse scores 0."""
    text = _read(config_path)
    if text is None:
        return 0.0
    colours = _last_value(text, "qt-slider-colours", _DEFAULT_SLIDER_COLOURS)
    if rule["type"] == "match":
        return float(colours == rule["expected_qt_slider_colours"])
    if rule["type"] == "blackish":
        try:
            values = [int(value) for value in colours.split(";")]
        except ValueError:
            return 0.0
        return float(all(value < 100 for value in values[:len(values) // 3 * 3]))
    return 0.0


def check_global_key_play_pause(config_path: str | None, rule: dict[str, Any]) -> float:
    """1 when whether a global play/pause key is set (`global-key-play-pause=` with a value:
    "1", empty: "0") is `expected_global_key_play_pause`."""
    text = _read(config_path)
    if text is None:
        return 0.0
    value = "0"
    for line in text.split("\n"):
        if "global-key-play-pause=" in line:
            value = "0" if line.split("=")[-1].strip() == "" else "1"
    return float(value == _expected_text(rule["expected_global_key_play_pause"]))


def is_vlc_recordings_folder(config_path: str | None, rule: dict[str, Any]) -> float:
    """1 when the first uncommented line naming `input-record-path` sets it to
    `recording_file_path`."""
    text = _read(config_path)
    if text is None:
        return 0.0
    for line in text.split("\n"):
        if line.startswith("#") or not line.strip():
            continue
        if "input-record-path" in line:
            return float(line.split("=")[-1].strip() == rule["recording_file_path"])
    return 0.0


def is_vlc_playing(status_path: str | None, rule: dict[str, Any]) -> float:
    """1 when VLC's `status.xml` says it is playing and its `meta` information's `filename`
    (rule `type` "file_name") or `url` (type "url") ends with the rule's value."""
    text = _read(status_path)
    if text is None:
        return 0.0
    tree = ElementTree.fromstring(text)
    if tree.findtext("state") != "playing":
        return 0.0
    kinds = {"file_name": ("filename", "file_name"), "url": ("url", "url")}
    if rule.get("type") not in kinds:
        logger.error("is_vlc_playing: unknown rule type %r", rule.get("type"))
        return 0.0
    info_name, rule_key = kinds[rule["type"]]
    value = tree.findtext(f'information/category[@name="meta"]/info[@name="{info_name}"]')
    return float(bool(value) and value.endswith(rule[rule_key]))


def is_vlc_fullscreen(window_size: dict[str, int] | None, screen_size: dict[str, int]) -> float:
    """1 when the window (`vm_window_size`) is exactly the screen's size."""
    if window_size is None:
        return 0.0
    return float(window_size["width"] == screen_size["width"]
                 and window_size["height"] == screen_size["height"])


VLC_GETTERS = {
    "vlc_config": get_vlc_config,
    "vlc_playing_info": get_vlc_playing_info,
    "vm_screen_size": get_vm_screen_size,
    "vm_window_size": get_vm_window_size,
}
VLC_METRICS = {
    "check_qt_bgcone": check_qt_bgcone,
    "check_qt_max_volume": check_qt_max_volume,
    "check_qt_minimal_view": check_qt_minimal_view,
    "check_qt_slider_colours": check_qt_slider_colours,
    "check_global_key_play_pause": check_global_key_play_pause,
    "check_one_instance_when_started_from_file": check_one_instance_when_started_from_file,
    "is_vlc_recordings_folder": is_vlc_recordings_folder,
    "is_vlc_playing": is_vlc_playing,
    "is_vlc_fullscreen": is_vlc_fullscreen,
}
