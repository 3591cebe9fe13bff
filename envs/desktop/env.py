"""`agent_rl/Desktop-v0`: OSWorld-style tasks on a real, private X desktop."""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

from envs.desktop.actions import ENDING_ACTIONS, Computer
from envs.desktop.apps import app_command
from envs.desktop.display import ROOT_MENU_LABELS, VM_HOME, DesktopSession
from envs.desktop.evaluate import EvalContext, evaluate
from envs.desktop.file_cache import MissingDownload, explain_missing, missing_downloads
from envs.desktop.generate import load_generated_tasks
from envs.desktop.observe import Observer, screen_text
from envs.desktop.oracle import DesktopOracle
from envs.desktop.recording import EpisodeRecorder, RecordedStep
from envs.desktop.setup_steps import run_steps
from envs.desktop.tasks import TaskFormatError, load_desktop_tasks, task_from_row
from envs.spaces import AssistantText, Message, MessagesSpace, image_part, text_part
from envs.tool_calls import (
    MalformedToolCall,
    ToolCall,
    format_tool_feedback,
    parse_tool_calls,
    run_tool_call,
    tools_system_prompt,
)

__all__ = ["DesktopEnv"]

logger = logging.getLogger(__name__)

LAUNCH_WAIT_S = 2.0  # longest wait for the window of an app chosen from a menu

OBSERVATIONS = ("text", "screenshot", "both")
TASK_SOURCES = ("shipped", "generated")
_PREAMBLE = """You operate a Linux desktop ({width}x{height} pixels) with a mouse and keyboard \
to complete the user's task. Apps: {apps}. Right-click the empty desktop for the app menu; \
Alt+F4 closes a window. After each turn you get a listing of the windows on screen with their \
title-bar buttons and, for apps that publish one, their accessibility tree: menus, buttons, \
text fields, editor and terminal text, each with the centre to click. Act with the tools \
below, one or more per turn. Call DONE when the task is complete, or FAIL if it cannot be \
done."""

_XFE_CONFIG = "[OPTIONS]\nroot_warn=0\n"


def _apps() -> str:
    """The apps this machine's desktop runs, as the system prompt names them."""
    roles = {"terminal": "terminal", "editor": "text editor", "file_manager": "file manager"}
    return ", ".join(f"{app_command(role)[0]} ({label})" for role, label in roles.items())


class DesktopEnv(gymnasium.Env[list[dict[str, str]], str]):
    """OSWorld-style desktop tasks on a private Xvfb display with real Debian apps.

    ## Description
    Each episode starts its own X server (Xvfb), the JWM window manager, a fresh HOME (seen by
    apps as `/home/user`) and `/tmp`, and then the task's set-up steps (launching the mousepad editor,
    xfce4-terminal, pcmanfm, writing files...). Apps run under bubblewrap without network. The agent works the
    desktop with OSWorld's `computer_13` actions until it calls DONE or FAIL; the task's
    evaluator then checks the final state (file contents, command output, window titles).

    ## Action Space
    One assistant turn (`AssistantText`): text with Hermes tool calls
    `<tool_call>{"name": "CLICK", "arguments": {"x": 10, "y": 20}}</tool_call>`, one tool per
    computer_13 action: MOVE_TO, CLICK, MOUSE_DOWN, MOUSE_UP, RIGHT_CLICK, DOUBLE_CLICK,
    DRAG_TO, SCROLL, TYPING, PRESS, KEY_DOWN, KEY_UP, HOTKEY, WAIT, FAIL, DONE. The schemas
    are in `info["tools"]`. An `<answer>...</answer>` counts as DONE.

    ## Observation Space
    Chat messages (`MessagesSpace`). `reset` returns the system prompt (with the tools) and the
    task instruction with the first screen. `step` returns one tool message per call, or one
    user message with feedback when the turn had no valid call, followed by the new screen.
    With `observation="text"` (the default) the screen is the text listing, appended to the
    last message; with "screenshot" or "both" it is a user message whose content is a list of
    parts (OpenAI's chat format, which vision-language models' chat templates take): the
    screenshot as an inline PNG, beside the listing for "both". Each step saves a screenshot PNG; its path is
    `env.last_screenshot`, and `env.timings` holds the last reset's and step's seconds. `info`
    holds only what the same seed reproduces (task id, turn, actions run, how it ended), plus
    `info["recording"]` at the end of an episode.

    ## Rewards
    On termination, the task evaluator's score in [0, 1] (1 = solved). Otherwise 0.

    ## Starting State
    A task drawn with the env's seeded generator from the split, or `options["task"]` (an
    OSWorld task dict or a row of `load_desktop_tasks`).

    ## Episode End
    Terminated when the agent calls DONE or FAIL; truncated after `max_turns` turns.

    ## Arguments
    split: "train" or "heldout". categories: domains to keep (None = all).
    task_source: "shipped" (the task files in `envs/desktop/tasks/`) or "generated" (many
    instances of the same kinds, `envs.desktop.generate`; `agent_rl/DesktopGen-v0`), each with
    its own train and held-out split.
    screen_width, screen_height: the virtual screen size.
    max_turns: turn budget. observation: "text", "screenshot" or "both" (see Observation
    Space). record_dir: where to keep recordings (HTML, contact sheet); None keeps screenshots
    only until the next reset. settle_s: pause after actions before the
    screen is read. wait_s: length of the WAIT action. render_mode: None or "rgb_array".

    ## Examples
    >>> env = gymnasium.make("agent_rl/Desktop-v0", split="train")
    >>> messages, info = env.reset(seed=0)
    >>> generated = gymnasium.make("agent_rl/DesktopGen-v0", split="heldout")  # 64 instances
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 1}

    def __init__(
        self,
        split: str = "train",
        categories: list[str] | None = None,
        screen_width: int = 1024,
        screen_height: int = 768,
        max_turns: int = 15,
        record_dir: str | None = None,
        settle_s: float = 0.08,
        wait_s: float = 1.0,
        render_mode: str | None = None,
        observation: str = "text",
        task_source: str = "shipped",
    ):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if observation not in OBSERVATIONS:
            raise ValueError(f"observation must be one of {', '.join(OBSERVATIONS)}, got "
                             f"{observation!r}")
        if task_source not in TASK_SOURCES:
            raise ValueError(f"task_source must be one of {', '.join(TASK_SOURCES)}, got "
                             f"{task_source!r}")
        self.observation = observation
        self.split = split
        self.task_source = task_source
        load = load_desktop_tasks if task_source == "shipped" else load_generated_tasks
        self.tasks = load(split, categories)
        self.dataset = self.tasks  # the env contract's name for the split's tasks
        self.screen_size = (screen_width, screen_height)
        self.max_turns = max_turns
        self.record_dir = Path(record_dir) if record_dir is not None else None
        self.settle_s = settle_s
        self.render_mode = render_mode
        self.computer = Computer(wait_s=wait_s)
        self.tools = self.computer.tools()
        self.action_space = AssistantText(max_length=100_000)
        self.observation_space = MessagesSpace()
        self._session: DesktopSession | None = None
        self._observer: Observer | None = None
        self._recorder: EpisodeRecorder | None = None
        self._task: dict[str, Any] = {}
        self._turn = 0
        self._finished = False
        self._last_screenshot: np.ndarray | None = None
        self.last_screenshot: Path | None = None
        self.timings: dict[str, float] = {}

    @property
    def display(self) -> str | None:
        """The X display of the running episode (e.g. ":3"), None between episodes."""
        return self._session.display if self._session is not None else None

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        return [tool.schema for tool in self.tools.values()]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        super().reset(seed=seed)
        started = time.perf_counter()
        self._end_episode()
        if options and options.get("task") is not None:
            task = task_from_row(self._task_row(options["task"]))
        else:
            task = task_from_row(self.tasks[int(self.np_random.integers(len(self.tasks)))])
        if missing := missing_downloads(task):  # before any X server starts
            raise MissingDownload(explain_missing(task["id"], missing))
        session = DesktopSession(*self.screen_size)
        self._session = session
        try:
            session.start()
            if app_command("file_manager")[0] == "xfe":  # the fallback; it asks first otherwise
                session.write_file(f"{VM_HOME}/.config/xfe/xferc", _XFE_CONFIG)
            self._observer = Observer(session.display, root_menu_labels=ROOT_MENU_LABELS)
            run_steps((session, self._observer), task["config"])
        except BaseException:
            self._end_episode()
            raise
        self._task, self._turn, self._finished = task, 0, False
        self.computer.session, self.computer.ended_by = session, None
        self._recorder = EpisodeRecorder(self._recording_folder(task), task)
        time.sleep(self.settle_s)
        observation, screenshot = self._observe(0)
        width, height = self.screen_size
        messages: list[Message] = [
            {
                "role": "system",
                "content": tools_system_prompt(
                    self.tools.values(), _PREAMBLE.format(width=width, height=height, apps=_apps())
                ),
            },
        ]
        lead = f"Task: {task['instruction']}\n\n"
        if self.observation == "text":
            messages.append({"role": "user", "content": f"{lead}The screen now:\n{observation}"})
        else:
            messages.append(self._screen_message(lead, observation, screenshot))
        seconds = time.perf_counter() - started
        self._recorder.add(RecordedStep(0, "", [], "", observation, screenshot.name, 0.0, seconds))
        self.timings = {"reset_seconds": seconds}
        info = {
            "task_id": task["id"],
            "category": (task.get("related_apps") or [task.get("snapshot", "os")])[0],
            "tools": self.tool_schemas,
        }
        return messages, info

    def _recording_folder(self, task: dict[str, Any]) -> Path:
        assert self._session is not None
        if self.record_dir is None:
            return self._session.root / "recording"
        self.record_dir.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f"{task['id']}-", dir=self.record_dir))

    def _observe(self, index: int) -> tuple[str, Path]:
        assert self._observer is not None and self._recorder is not None
        observer = self._observer
        assert self._session is not None
        text = screen_text(observer, self._session)
        image = observer.screenshot()
        if self.render_mode == "rgb_array":
            self._last_screenshot = np.asarray(image)
        self.last_screenshot = self._recorder.save_screenshot(image, index)
        return text, self.last_screenshot

    def _screen_message(self, lead: str, listing: str, screenshot: Path) -> Message:
        """The screen as a user message of parts: the screenshot, with the listing for "both"."""
        text = (f"{lead}The screen now:\n{listing}" if self.observation == "both"
                else f"{lead}The screen now (screenshot):")
        return {"role": "user", "content": [text_part(text), image_part(screenshot.read_bytes())]}

    def _await_launched_window(self, before: tuple[set[int], set[int]]) -> None:
        """A menu closed during the step (an item was chosen): the app it starts takes a few
        hundred milliseconds to map its window, so wait (at most `LAUNCH_WAIT_S`) for a new
        one rather than show a screen the next instant will change."""
        assert self._observer is not None
        clients, menus = before
        if not menus or self._observer.window_ids()[1]:
            return
        deadline = time.monotonic() + LAUNCH_WAIT_S
        while time.monotonic() < deadline:
            if self._observer.window_ids()[0] - clients:
                time.sleep(self.settle_s)  # let it draw its first frame
                return
            time.sleep(0.02)

    def oracle_policy(self, task: dict[str, Any]) -> DesktopOracle:
        """The scripted oracle that solves a generated task (`envs.desktop.oracle`): the policy
        the demonstration maker plays. A shipped task has no oracle here (OracleError)."""
        return DesktopOracle(task)

    def _task_row(self, choice: Any) -> dict[str, Any]:
        """`options["task"]` as a task row: a row or task itself, an index, or a task id."""
        if isinstance(choice, int):
            if not 0 <= choice < len(self.tasks):
                raise TaskFormatError(f"task index {choice} is outside this split's "
                                      f"{len(self.tasks)} tasks")
            return self.tasks[choice]
        if isinstance(choice, str):
            for row in self.tasks:
                if row["task_id"] == choice:
                    return row
            raise TaskFormatError(f"no task {choice!r} in the {self.split} split")
        return choice

    def step(self, action: str) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        if self._session is None or self._recorder is None:
            raise RuntimeError("DesktopEnv.step() called before reset()")
        if self._finished:
            raise RuntimeError("the episode has ended; call reset() before step()")
        started = time.perf_counter()
        self._turn += 1
        parsed = parse_tool_calls(action, self.tools)
        calls = list(parsed.calls)
        if parsed.answer is not None:
            calls.append(ToolCall("DONE", {}))
        messages: list[Message] = []
        ran: list[dict[str, Any]] = []
        if not parsed.valid_calls and parsed.answer is None:
            messages.append({"role": "user", "content": format_tool_feedback(parsed.errors)})
        else:
            before = self._observer.window_ids()
            for call in calls:
                if isinstance(call, MalformedToolCall):
                    content = f"Error: {call.reason}"
                    name = call.name or "error"
                    messages.append({"role": "tool", "name": name, "content": content})
                    continue
                result = run_tool_call(call, self.tools)
                messages.append({"role": "tool", "name": call.name, "content": result.content})
                ran.append(call.to_dict() | {"error": result.error})
                if call.name in ENDING_ACTIONS:
                    break
            time.sleep(self.settle_s)
            self._await_launched_window(before)
        terminated = self.computer.ended_by is not None
        truncated = not terminated and self._turn >= self.max_turns
        reward, evaluation_error = 0.0, None
        if terminated:
            reward, evaluation_error = self._evaluate()
        observation, screenshot = self._observe(self._turn)
        feedback = "\n".join(message["content"] for message in messages)
        if not terminated and self.observation == "text":
            suffix = f"\n\nThe screen now:\n{observation}"
            messages[-1] = messages[-1] | {"content": messages[-1]["content"] + suffix}
        elif not terminated:
            messages.append(self._screen_message("", observation, screenshot))
        self._finished = terminated or truncated
        seconds = time.perf_counter() - started
        self._recorder.add(
            RecordedStep(self._turn, action, ran, feedback, observation, screenshot.name, reward, seconds)
        )
        self.timings["step_seconds"] = seconds
        info = {
            "task_id": self._task["id"],
            "turn": self._turn,
            "actions": ran,
            "ended_by": self.computer.ended_by,
        }
        if evaluation_error is not None:
            info["evaluation_error"] = evaluation_error
        if self._finished:
            info["recording"] = self._finish_recording(reward)
        return messages, reward, terminated, truncated, info

    def _evaluate(self) -> tuple[float, str | None]:
        """The evaluator's score; an evaluator that crashes scores 0 and says why in info."""
        assert self._session is not None and self._observer is not None
        evaluator = self._task["evaluator"]
        context = EvalContext(self._session, self._observer, self.computer.ended_by)
        try:
            run_steps((self._session, self._observer), evaluator.get("postconfig", []))
            return float(evaluate(evaluator, context)), None
        except Exception as error:  # noqa: BLE001 - a broken check must not end training
            logger.warning("evaluator of task %s failed: %r", self._task["id"], error)
            return 0.0, f"{type(error).__name__}: {error}"

    def _finish_recording(self, reward: float) -> str:
        assert self._recorder is not None
        if self.record_dir is None:
            return str(self._recorder.folder)
        page = self._recorder.finish(reward=reward, turns=self._turn, ended_by=self.computer.ended_by)
        return str(page)

    def render(self) -> np.ndarray | None:
        """The last screenshot as an (H, W, 3) uint8 array when render_mode is "rgb_array"."""
        return self._last_screenshot if self.render_mode == "rgb_array" else None

    def _end_episode(self) -> None:
        if self._recorder is not None and not self._finished and self.record_dir is not None:
            self._recorder.finish(reward=0.0, turns=self._turn, ended_by="closed")
        self._recorder = None
        if self._observer is not None:
            self._observer.close()
            self._observer = None
        if self._session is not None:
            self._session.close()
            self._session = None
        self.computer.session = None

    def close(self) -> None:
        self._end_episode()
        super().close()
