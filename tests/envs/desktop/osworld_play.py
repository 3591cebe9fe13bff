"""Plays a scripted solution of one of OSWorld's own tasks on the desktop env, for the
end-to-end tests of each domain: each screen-reading step is placed as the oracle places it
(`envs.desktop.oracle.place`), waiting while the screen does not show what it needs."""

from __future__ import annotations

from collections.abc import Callable

from envs.desktop import DesktopEnv
from envs.desktop.oracle import Await, Click, TitleButton, call, place

# A call, a screen-reading step, or a function of the screen that returns calls.
Step = str | Click | TitleButton | Await | Callable[[str], list[str]]


def play(env: DesktopEnv, task: dict, steps: list[Step], max_waits: int) -> tuple[float, dict]:
    """Reset to `task`, run the steps, each placed from the last screen, then DONE; returns
    the reward and the last info."""
    messages, _ = env.reset(options={"task": task})
    for step in steps:
        screen = messages[-1]["content"]
        if isinstance(step, Click | TitleButton | Await):
            for _ in range(max_waits):
                if (placed := place(step, screen)) is not None:
                    break
                messages, *_ = env.step(call("WAIT"))
                screen = messages[-1]["content"]
            else:
                raise AssertionError(f"{step} never showed on the screen:\n{screen}")
            turns = [placed] if placed else []
        else:
            turns = step(screen) if callable(step) else [step]
        for turn in turns:
            messages, _, terminated, truncated, _ = env.step(turn)
            assert not (terminated or truncated), turn
    _, reward, terminated, _, info = env.step(call("DONE"))
    assert terminated
    return reward, info
