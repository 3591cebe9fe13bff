"""Faults injected on purpose, on the real stack: the run survives each and the ledger balances.

The env-level faults are first checked on the real sandboxed Python env alone (fast); then one
asynchronous run on Ray with a real vLLM rollout actor injects every fault at once: a rollout
actor killed mid-episode (Ray restarts it), env.step raising, hung and killed sandbox calls,
malformed model output, delayed weight broadcasts and a queue filled to its cap.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import gymnasium
import pytest
import torch

from agent_rl.config import ConfigError
from agent_rl.env_config import EnvConfig
from agent_rl.learn.checkpoint import (
    CheckpointWriteError,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from agent_rl.learn.config import LearnerConfig
from agent_rl.orchestrate.faults import (
    DELAY_BROADCAST,
    DRIVER_FAULTS,
    ENV_FAULTS,
    ENV_RAISE,
    FILL_QUEUE,
    KILL_ACTOR,
    KILL_LEARNER,
    MALFORMED_OUTPUTS,
    SANDBOX_HANG,
    SANDBOX_KILL,
    FaultConfig,
    FaultInjector,
    FaultyEnvFactory,
    InjectedEnvFault,
)
from agent_rl.orchestrate.ledger import read_ledger
from agent_rl.orchestrate.pipeline import train
from agent_rl.orchestrate.ray_session import RayUnreachableError, check_ray_address
from agent_rl.orchestrate.run_state import RunState
from agent_rl.rollout.config import RolloutConfig
from agent_rl.rollout.engine import EngineConfig
from agent_rl.train_config import PipelineConfig, TrainConfig, load_train_config

SANDBOX_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def python_env():
    import envs  # noqa: F401 - registers the env ids
    from sandbox import SandboxConfig

    env = gymnasium.make(
        "agent_rl/PythonTool-v0",
        split="train",
        max_turns=100,
        sandbox_config=SandboxConfig(timeout_s=SANDBOX_TIMEOUT_S),
    )
    env.reset(seed=0)
    yield env
    env.close()


@pytest.mark.parametrize("kind", sorted(MALFORMED_OUTPUTS))
def test_malformed_model_output_gets_feedback_and_the_episode_goes_on(python_env, kind) -> None:
    messages, reward, terminated, truncated, _ = python_env.step(MALFORMED_OUTPUTS[kind])
    assert messages and messages[0]["content"].strip()
    assert (reward, terminated, truncated) == (0.0, False, False)


def _faulty_env(**faults: int) -> gymnasium.Env:
    from sandbox import SandboxConfig

    env_kwargs = {"split": "train", "max_turns": 100,
                  "sandbox_config": SandboxConfig(timeout_s=SANDBOX_TIMEOUT_S)}
    factory = FaultyEnvFactory("agent_rl/PythonTool-v0", env_kwargs, FaultConfig(**faults))
    env = factory()
    env.reset(seed=0)
    return env


def test_hung_sandbox_call_is_killed_at_its_limit_and_ends_the_episode() -> None:
    env = _faulty_env(sandbox_hang_every=1)
    try:
        start = time.perf_counter()
        messages, reward, terminated, truncated, info = env.step("anything")
        assert time.perf_counter() - start < SANDBOX_TIMEOUT_S + 10
        assert "time limit" in messages[0]["content"] or "ran longer" in messages[0]["content"]
        assert (reward, terminated, truncated) == (0.0, False, True)
        assert info["end_reason"] == "sandbox_timeout"
        assert [fault["kind"] for fault in info["injected_faults"]] == [SANDBOX_HANG]
    finally:
        env.close()


def test_killed_sandbox_session_is_restarted_and_the_next_call_works() -> None:
    env = _faulty_env(sandbox_kill_every=2)
    try:
        env.step('<tool_call>{"name": "python", "arguments": {"code": "x = 1"}}</tool_call>')
        messages, *_ = env.step("anything")  # step 2: the fault kills the interpreter
        assert "restarted" in messages[0]["content"]
        messages, *_ = env.step(
            '<tool_call>{"name": "python", "arguments": {"code": "print(6 * 7)"}}</tool_call>'
        )
        assert messages[0]["content"].strip() == "42"
    finally:
        env.close()


def test_env_raise_fault_raises_an_injected_error() -> None:
    env = _faulty_env(env_raise_every=1)
    try:
        with pytest.raises(InjectedEnvFault):
            env.step("anything")
    finally:
        env.close()


def test_driver_faults_fire_at_their_updates_and_random_ones_at_their_interval() -> None:
    config = FaultConfig(kill_actor_at_updates=[2], kill_learner_at_update=3,
                         fill_queue_at_updates=[1], weight_broadcast_delay_s=0.5)
    injector = FaultInjector(config)
    assert [injector.after_update(v) for v in (1, 2, 3, 4)] == [
        {FILL_QUEUE}, {KILL_ACTOR}, {KILL_LEARNER}, set()
    ]
    assert injector.broadcast_delay_s() == 0.5

    now = [0.0]
    random_injector = FaultInjector(FaultConfig(random_every_s=10, random_delay_s=3),
                                    clock=lambda: now[0])
    assert random_injector.after_update(1) == set()
    now[0] = 10.0
    (fault,) = random_injector.after_update(2)
    assert fault in DRIVER_FAULTS
    assert random_injector.after_update(3) == set()
    with pytest.raises(ValueError, match="unknown faults"):
        FaultInjector(FaultConfig(random_faults=["kill_everything"]))


def test_a_misspelled_fault_key_names_the_nearest_valid_one(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("faults:\n  env_rais_every: 3\n")
    with pytest.raises(ConfigError, match="env_raise_every"):
        load_train_config(path)


def test_unreachable_ray_address_fails_in_seconds_with_a_user_error() -> None:
    start = time.perf_counter()
    with pytest.raises(RayUnreachableError, match="ray start --head"):
        check_ray_address("127.0.0.1:1")
    assert time.perf_counter() - start < 10


def test_missing_model_fails_before_anything_starts(tmp_path: Path) -> None:
    from agent_rl.model_store import ModelNotFoundError

    with pytest.raises(ModelNotFoundError):
        train(TrainConfig(model=str(tmp_path / "no_such_model"), out_dir=tmp_path / "run"))


@pytest.fixture
def tiny_disk(tmp_path: Path):
    """A real 1 MiB filesystem (tmpfs), so a checkpoint really runs out of space."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if shutil.which("mount") is None or subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
    ).returncode:
        pytest.skip("mounting a small tmpfs needs root (mount -t tmpfs)")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_full_disk_gives_a_checkpoint_error_and_keeps_the_previous_checkpoint(tiny_disk) -> None:
    save_checkpoint(tiny_disk, {"version": 1, "model": {"w": torch.zeros(10)}}, RunState().to_dict())
    too_big = {"version": 2, "model": {"w": torch.zeros(1 << 20)}}  # 4 MiB
    with pytest.raises(CheckpointWriteError, match="free disk space"):
        save_checkpoint(tiny_disk, too_big, RunState().to_dict())
    assert latest_checkpoint(tiny_disk).name == "update_000001"
    assert not list((tiny_disk / "checkpoints").glob(".partial_*"))
    learner_state, _ = load_checkpoint(latest_checkpoint(tiny_disk))
    assert learner_state["version"] == 1


# -- one real run with every fault -----------------------------------------------------------


@pytest.fixture(scope="module")
def faulty_run(local_ray, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("faulty_run")
    config = TrainConfig(
        model="tiny",
        out_dir=out_dir,
        env=EnvConfig(kwargs={"categories": ["arithmetic"], "max_turns": 2},
                      sandbox_timeout_s=SANDBOX_TIMEOUT_S),
        rollout=RolloutConfig(group_size=2, max_tokens_per_turn=16),
        engine=EngineConfig(max_model_len=512, kv_cache_gib=0.25),
        learner=LearnerConfig(lr=1e-4),
        pipeline=PipelineConfig(groups_per_update=1, groups_in_flight_per_actor=2,
                                max_lag=2, num_updates=4, stall_timeout_s=300.0),
        faults=FaultConfig(
            kill_actor_at_updates=[1],
            fill_queue_at_updates=[2],
            # Held past the next update, whose broadcast goes out at once and must supersede it:
            # the older weights arriving last once crashed a 20-minute soak.
            delay_broadcast_at_updates=[1],
            random_delay_s=8.0,
            env_raise_every=7,
            sandbox_hang_every=5,
            sandbox_kill_every=4,
            malformed_output_every=3,
        ),
    )
    return train(config)


@pytest.mark.slow
def test_every_injected_fault_is_recovered_and_the_run_completes(faulty_run) -> None:
    faults = faulty_run.faults
    assert faulty_run.updates == 4
    expected = {KILL_ACTOR, FILL_QUEUE, DELAY_BROADCAST, *ENV_FAULTS}
    assert set(faults["injected"]) == expected, faults
    assert faults["recovered"] == faults["injected"], faults
    assert faults["actor_restarts"] == 1
    assert faults["injected"][ENV_RAISE] >= 1 and faults["injected"][SANDBOX_HANG] >= 1
    assert faults["injected"][SANDBOX_KILL] >= 1
    # The fill-queue fault held the learner until back-pressure stopped new work, not beyond.
    assert faults["untrained_peak"] == faults["untrained_cap"]
    assert faulty_run.lag_max <= 2


@pytest.mark.slow
def test_every_group_is_trained_once_dropped_with_a_reason_or_rerun(faulty_run) -> None:
    ledger = faulty_run.ledger
    assert ledger["trained"] == 4
    assert ledger["generated"] == ledger["trained"] + ledger["dropped"]
    assert set(ledger["dropped_by_reason"]) <= {"stale", "run_ended", "env_error"}
    assert ledger["dropped_by_reason"].get("env_error", 0) >= 1
    saved = read_ledger(faulty_run.run_dir)
    assert saved["status"] == "finished"
    assert len(saved["trained"]) == len(set(saved["trained"])) == 4
    assert "actor_died" in saved["rerun"].values()
    assert saved["counts"] == ledger
