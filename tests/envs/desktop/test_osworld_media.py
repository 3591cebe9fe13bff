"""OSWorld's own GIMP and VLC tasks, unchanged, run end to end on the desktop.

Three GIMP task files and three VLC ones (`tests/data/osworld_media/`, copied from OSWorld).
Their input files (a photo for GIMP's vignette task, the videos of the VLC tasks) are written here
and served from the offline file cache under the URLs the tasks name. A scripted solution plays
each task through the env's actions, placing GIMP's clicks from the AT-SPI tree (VLC's Qt widgets
publish none, so its solutions use VLC's own keys once its window shows the video's title, and
set a preference in `vlcrc` from the desktop's terminal after quitting VLC); it scores 1, and DONE
at once scores 0.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest
from osworld_play import Step, play
from PIL import Image

from envs.desktop import DesktopEnv, file_cache
from envs.desktop.accessibility import accessibility_missing
from envs.desktop.coverage import App, installed_here
from envs.desktop.display import REQUIRED_PROGRAMS
from envs.desktop.oracle import Await, Click, call

TASKS_DIR = Path(__file__).parents[2] / "data" / "osworld_media"
MAX_WAITS = 20  # WAIT turns a step may take for what it needs to show (GIMP starts slowly)

_missing = [program for program in (*REQUIRED_PROGRAMS, "gimp", "vlc", "socat", "curl")
            if not shutil.which(program)]
if no_tree := accessibility_missing():
    _missing.append(no_tree)
if not installed_here(App("pyautogui", python_module="pyautogui")):
    _missing.append("pyautogui for the desktop's python3 (the tasks quit GIMP with it)")
needs_media_desktop = pytest.mark.skipif(
    bool(_missing), reason=f"missing: {', '.join(_missing)} (`make desktop-apps` installs "
    "GIMP, VLC, socat, pyautogui and the desktop's programs)")




def load_task(domain: str, task_id: str) -> dict:
    return json.loads(next((TASKS_DIR / domain).glob(f"{task_id}*.json")).read_text())


def write_photo(path: Path) -> Path:
    rows, cols = np.mgrid[0:120, 0:160]
    Image.fromarray(np.stack([cols, rows * 2, 255 - cols], axis=2).astype(np.uint8)).save(path)
    return path


def write_video(path: Path, seconds: int = 120, fps: int = 5) -> Path:
    """A small MPEG-4 video, long enough to be still playing when it is scored."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (160, 120))
    for frame in range(seconds * fps):
        writer.write(np.full((120, 160, 3), (frame * 7) % 255, np.uint8))
    writer.release()
    return path


def author_files(folder: Path) -> dict[str, list[Path]]:
    """Task id -> the files its URLs serve, in `file_cache.task_urls` order."""
    video = write_video(folder / "video.mp4")
    return {"a746add2": [write_photo(folder / "dog.png")], "8d9fd4e2": [video],
            "59f21cfb": [video], "9195653c": []}


def open_on_desktop(name: str) -> list[Step]:
    """VLC's Open File dialog (ctrl+O) takes a typed path; then wait for its title."""
    return [call("HOTKEY", keys=["ctrl", "o"]), Await("Select one or more files to open"),
            call("TYPING", text=f"/home/user/Desktop/{name}\n"), Await(f"{re.escape(name)} - VLC")]


def click_match(pattern: str) -> Callable[[str], list[str]]:
    """A click at the centre `pattern` captures (x, y) on the screen, for the X listing's menu
    items, which the AT-SPI tree does not hold."""
    def click(screen: str) -> list[str]:
        found = re.search(pattern, screen, re.MULTILINE)
        assert found, f"{pattern} is not on the screen:\n{screen}"
        return [call("CLICK", x=int(found[1]), y=int(found[2]))]
    return click


TERMINAL_ITEM = r'menu item "Terminal" at .* center \((\d+), (\d+)\)'


def from_a_terminal(command: str) -> list[Step]:
    """Quit VLC (ctrl+Q, so that it saves its settings first and nothing overwrites the edit),
    open the desktop's terminal from its right-click menu and run `command` there."""
    return [Await("VLC media player"), call("HOTKEY", keys=["ctrl", "q"]),
            Await("VLC media player", present=False),
            call("CLICK", x=900, y=700, button="right"), Await(TERMINAL_ITEM),
            click_match(TERMINAL_ITEM), Await(r'terminal "Terminal".*\[focused\]'),
            call("TYPING", text=f"{command}\n"), call("WAIT")]


SOLUTIONS: dict[str, tuple[str, list[Step]]] = {
    # Hide the docks: Windows > Hide Docks.
    "d52d6308": ("gimp", [Click("menu", "Windows"), Click("check menu item", "Hide Docks")]),
    # Open the Vignette filter's window: Filters > Light and Shadow > Vignette...
    "a746add2": ("gimp", [Click("menu", "Filters"),
                          Click("menu", "Light and Shadow"), Click("menu item", "Vignette..."),
                          Await('dialog "Vignette')]),
    # At least 100 undo levels: Edit > Preferences, System Resources (the first page).
    "7b7617bd": ("gimp", [Click("menu", "Edit"), Click("menu item", "Preferences"),
                          Click("spin button", text="5"), call("HOTKEY", keys=["ctrl", "a"]),
                          call("TYPING", text="100\t"), Click("push button", "OK"),
                          Await('dialog "Preferences', present=False)]),
    # Fill the screen: VLC's key f, once the video plays.
    "8d9fd4e2": ("vlc", [Await(r"Gen 2\.mp4 - VLC"), call("PRESS", key="f"), call("WAIT")]),
    # Play the video on the desktop.
    "59f21cfb": ("vlc", open_on_desktop(
        "Rick Astley - Never Gonna Give You Up (Official Music Video).mp4")),
    # A louder maximum volume: VLC's qt-max-volume, which its Preferences write to vlcrc, set
    # there from a terminal once VLC has quit.
    "9195653c": ("vlc", from_a_terminal(
        "mkdir -p ~/.config/vlc && echo qt-max-volume=200 >> ~/.config/vlc/vlcrc")),
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every task's input files in a private file cache, under the URLs its task file names."""
    folder = tmp_path_factory.mktemp("osworld-media")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENT_RL_HOME", str(folder / "agent-rl-home"))
        for task_id, files in author_files(folder).items():
            task = load_task(SOLUTIONS[task_id][0], task_id)
            for url, file in zip(file_cache.task_urls(task), files, strict=True):
                file_cache.add(url, file)
        yield


@pytest.fixture(scope="module")
def env(cache: None) -> Iterator[DesktopEnv]:
    desktop = DesktopEnv(max_turns=80)  # room for the steps' WAITs
    yield desktop
    desktop.close()



@pytest.mark.slow
@needs_media_desktop
@pytest.mark.parametrize("task_id", list(SOLUTIONS))
def test_osworld_media_task_scores_a_scripted_solution_1_and_a_no_op_0(
        env: DesktopEnv, task_id: str) -> None:
    domain, steps = SOLUTIONS[task_id]
    task = load_task(domain, task_id)
    reward, info = play(env, task, [], MAX_WAITS)
    assert (reward, info.get("evaluation_error")) == (0.0, None)
    reward, info = play(env, task, steps, MAX_WAITS)
    assert (reward, info.get("evaluation_error")) == (1.0, None)
