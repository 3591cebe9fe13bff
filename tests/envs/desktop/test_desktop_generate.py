"""Generated desktop tasks: the generator is seeded and deterministic, its train and held-out
instances never share parameters, every instance is an OSWorld task this env runs, and the
package's oracle solves instances of every kind from the observation text while doing nothing
scores 0."""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterator

import gymnasium
import pytest

import envs  # noqa: F401 - registers agent_rl/DesktopGen-v0
from envs.desktop import DesktopEnv
from envs.desktop.accessibility import accessibility_missing
from envs.desktop.apps import APT_PACKAGES, GTK_APPS
from envs.desktop.display import REQUIRED_PROGRAMS
from envs.desktop.generate import (
    DOMAINS,
    KINDS,
    WINDOW_APPS,
    generate_tasks,
    load_generated_tasks,
    split_of,
    write_tasks,
)
from envs.desktop.oracle import (
    SOLUTIONS,
    Click,
    DesktopOracle,
    OracleError,
    button_center,
    find_in_tree,
)
from envs.desktop.tasks import check_task, load_desktop_tasks, task_to_row
from envs.tool_calls import format_tool_call, parse_tool_calls

_missing = [program for program in (*REQUIRED_PROGRAMS, *GTK_APPS, *WINDOW_APPS)
            if not shutil.which(program)]
if no_tree := accessibility_missing():
    _missing.append(no_tree)
needs_desktop = pytest.mark.skipif(
    bool(_missing), reason=f"desktop programs missing: {', '.join(_missing)} (apt-get install -y "
    f"--no-install-recommends {APT_PACKAGES})")

SCREEN = """Task: Close the xclock window, leaving the other windows open.

The screen now:
screen 1024x768, mouse at (512, 384), 2 window(s), top of the stack first:
  [1] window "xclock" app=XClock at (61, 79) size 164x164
      [1.1] button "minimize" at (153, 58) size 24x19 center (165, 67)
      [1.2] button "maximize" at (177, 58) size 24x19 center (189, 67)
      [1.3] button "close" at (201, 58) size 24x19 center (213, 67)
  [2] window "xlogo" app=XLogo at (33, 51) size 100x100 [focused]
      [2.1] button "minimize" at (61, 30) size 24x19 center (73, 39)
      [2.2] button "maximize" at (85, 30) size 24x19 center (97, 39)
      [2.3] button "close" at (109, 30) size 24x19 center (121, 39)
accessibility tree (AT-SPI):
  app "pcmanfm"
    frame "user" center (353, 282) [active]
          menu "File" center (55, 64)
                    icon center (239, 155)
                      | reports
                    icon center (339, 155)
                      | music
"""


def kind_of(task: dict) -> str:
    return task["generator"]["kind"]


def test_the_same_seed_gives_the_same_tasks_and_another_seed_others() -> None:
    assert generate_tasks("train") == generate_tasks("train")
    assert generate_tasks("heldout", seed=0) == generate_tasks("heldout", seed=0)
    assert generate_tasks("train", seed=1) != generate_tasks("train", seed=0)


def test_train_and_heldout_instances_never_share_their_parameters() -> None:
    for seed in (0, 1):
        train, heldout = generate_tasks("train", seed=seed), generate_tasks("heldout", seed=seed)
        key = [lambda task: task["id"], lambda task: (kind_of(task), repr(task["generator"]))]
        for fingerprint in key:
            assert not {fingerprint(task) for task in train} & {fingerprint(task) for task in heldout}
        assert all(split_of(kind_of(t), t["generator"]["params"]) == "train" for t in train)
        assert all(split_of(kind_of(t), t["generator"]["params"]) == "heldout" for t in heldout)
        assert len({task["id"] for task in train}) == len(train)


def test_heldout_has_16_instances_per_domain_and_both_splits_cover_every_kind() -> None:
    heldout = generate_tasks("heldout")
    assert Counter(task["related_apps"][0] for task in heldout) == {domain: 16 for domain in DOMAINS}
    assert set(DOMAINS) == {"terminal", "editor", "file_manager", "window"}
    for split in ("train", "heldout"):
        assert {kind_of(task) for task in generate_tasks(split)} == {kind.name for kind in KINDS}
    first_of_each_domain = {}
    for task in heldout:  # interleaved: any first N of a domain spread over its kinds
        first_of_each_domain.setdefault(task["snapshot"], []).append(kind_of(task))
    for domain, kinds in first_of_each_domain.items():
        domain_kinds = [kind.name for kind in KINDS if kind.domain == domain]
        assert kinds[: len(domain_kinds)] == domain_kinds


def test_every_generated_task_is_an_osworld_task_this_env_runs() -> None:
    for split in ("train", "heldout"):
        for task in generate_tasks(split):
            check_task(task)
            assert {"id", "snapshot", "instruction", "config", "evaluator", "related_apps"} <= task.keys()
            assert task["config"] and task["evaluator"]["func"] != "infeasible"


def test_the_env_draws_generated_tasks_as_rows_of_the_task_set_columns() -> None:
    env = gymnasium.make("agent_rl/DesktopGen-v0", split="heldout")
    try:
        rows = list(env.unwrapped.dataset)
    finally:
        env.close()
    assert len(rows) == 64 and rows == list(load_generated_tasks("heldout"))
    assert rows[0] == task_to_row(generate_tasks("heldout")[0])
    windows = DesktopEnv(split="train", task_source="generated", categories=["window"]).dataset
    assert set(windows["category"]) == {"window"} and len(windows) == 64
    with pytest.raises(ValueError, match="task_source must be one of shipped, generated"):
        DesktopEnv(task_source="made-up")


def test_written_tasks_load_back_in_osworld_layout(tmp_path) -> None:
    assert write_tasks(tmp_path) == {"train": 256, "heldout": 64}
    loaded = load_desktop_tasks("heldout", tasks_dir=tmp_path)
    assert sorted(loaded["task_id"]) == sorted(task["id"] for task in generate_tasks("heldout"))


def test_every_kind_has_an_oracle_solution_and_other_tasks_are_refused() -> None:
    assert set(SOLUTIONS) == {kind.name for kind in KINDS}
    shipped = load_desktop_tasks("train")[0]
    with pytest.raises(OracleError, match="not a generated desktop task"):
        DesktopOracle(shipped)


def test_the_oracle_places_clicks_from_the_screen_text() -> None:
    assert button_center(SCREEN, "xlogo", "close") == (121, 39)
    assert button_center(SCREEN, "xclock", "maximize") == (189, 67)
    assert button_center(SCREEN, "xeyes", "close") is None
    assert find_in_tree(SCREEN, Click("icon", text="music")) == (339, 155)
    assert find_in_tree(SCREEN, Click("menu", "File")) == (55, 64)
    assert find_in_tree(SCREEN, Click("icon", text="videos")) is None
    task = next(task for task in generate_tasks("train") if kind_of(task) == "close-window")
    target = task["generator"]["params"]["target"]
    screen = SCREEN.replace("xclock", target).replace("xlogo", "other")
    turn = DesktopOracle(task)([{"role": "user", "content": screen}])
    (click,) = parse_tool_calls(turn).calls
    assert (click.name, click.arguments) == ("CLICK", {"x": 213, "y": 67})


def test_the_oracle_waits_for_what_it_needs_then_gives_up_with_fail() -> None:
    task = next(task for task in generate_tasks("train") if kind_of(task) == "open-folder")
    oracle = DesktopOracle(task, max_waits=3)
    empty = [{"role": "user", "content": "The screen now:\nscreen 1024x768, 0 window(s)"}]
    assert [oracle(empty) for _ in range(4)] == [format_tool_call("WAIT", {})] * 3 + [
        format_tool_call("FAIL", {})]


@pytest.fixture(scope="module")
def env() -> Iterator[DesktopEnv]:
    desktop = DesktopEnv(split="heldout", task_source="generated", max_turns=30)
    yield desktop
    desktop.close()


def play_oracle(env: DesktopEnv, task: dict) -> tuple[float, int]:
    oracle = env.oracle_policy(task)
    messages, _ = env.reset(options={"task": task})
    for turn in range(1, env.max_turns + 1):
        messages, reward, terminated, truncated, info = env.step(oracle(messages))
        if terminated or truncated:
            assert "evaluation_error" not in info, info
            return reward, turn
    raise AssertionError("the episode never ended")


# One instance of each kind, from the two splits in turn: about 5 s each on 2 loaded cores.
SAMPLE = [(("heldout", "train")[index % 2], kind.name) for index, kind in enumerate(KINDS)]


@needs_desktop
@pytest.mark.parametrize(("split", "kind"), SAMPLE, ids=[f"{k}-{s}" for s, k in SAMPLE])
def test_the_oracle_solves_an_instance_of_every_kind(env: DesktopEnv, split: str, kind: str) -> None:
    task = next(task for task in generate_tasks(split) if kind_of(task) == kind)
    reward, turns = play_oracle(env, task)
    assert reward == 1.0 and turns <= 6, (task["instruction"], turns)


@needs_desktop
@pytest.mark.parametrize("domain", DOMAINS)
def test_done_at_once_scores_zero(env: DesktopEnv, domain: str) -> None:
    task = next(task for task in generate_tasks("heldout") if task["snapshot"] == domain)
    env.reset(options={"task": task})
    _, reward, terminated, _, _ = env.step(format_tool_call("DONE", {}))
    assert terminated and reward == 0.0
