"""SessionPool on every real backend (bubblewrap; Docker where it runs): hand-out, recycling,
bounds, async acquire."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from test_sandbox import config_for

from sandbox import SandboxClosedError, SandboxConfig, SandboxError, SandboxStartError, SessionPool


@pytest.fixture(scope="module", params=["bwrap", "docker"])
def config(request: pytest.FixtureRequest) -> SandboxConfig:
    return config_for(request.param)


@pytest.fixture
def pool(config):
    with SessionPool(config, size=2) as pool:
        yield pool


def test_released_session_comes_back_clean(pool):
    first = pool.acquire(timeout_s=10)
    first.run("secret = 'episode one'")
    first.write_file("left.txt", b"behind")
    pool.release(first)
    seen = [pool.acquire(timeout_s=10) for _ in range(2)]
    for session in seen:
        result = session.run("import os\n('secret' in globals(), os.listdir('.'))")
        assert result.value == "(False, [])"
    for session in seen:
        pool.release(session)


def test_pool_hands_out_at_most_size_sessions(pool):
    held = [pool.acquire(timeout_s=10), pool.acquire(timeout_s=10)]
    assert held[0] is not held[1]
    with pytest.raises(SandboxStartError, match="no sandbox session became free"):
        pool.acquire(timeout_s=0.2)
    pool.release(held[0])
    assert pool.acquire(timeout_s=10).run("1 + 1").value == "2"


def test_a_warm_pool_hands_out_a_started_session_without_waiting(pool):
    for session in [pool.acquire(timeout_s=60), pool.acquire(timeout_s=60)]:
        pool.release(session)
    deadline = time.monotonic() + 60
    while pool.ready < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    session = pool.acquire(timeout_s=0)  # raises unless a session is ready this instant
    assert session.run("1 + 1").value == "2"
    pool.release(session)


def test_pool_is_safe_to_use_from_threads(pool):
    values: list[str | None] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        with pool.session(timeout_s=30) as session:
            value = session.run(f"{index} * 2").value
        with lock:
            values.append(value)

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(values, key=int) == [str(index * 2) for index in range(6)]


def test_async_acquire_steps_sessions_concurrently(pool):
    async def episode(index: int) -> str | None:
        async with pool.asession(timeout_s=30) as session:
            result = await session.arun(f"import time\ntime.sleep(0.4)\n{index}")
            return result.value

    async def main() -> list[str | None]:
        return await asyncio.gather(*(episode(index) for index in range(2)))

    started = time.monotonic()
    assert asyncio.run(main()) == ["0", "1"]
    assert time.monotonic() - started < 1.5


def test_foreign_session_is_refused_and_closed_pool_refuses(pool, config):
    with SessionPool(config, size=1) as other:
        stranger = other.acquire(timeout_s=10)
        with pytest.raises(SandboxError, match="does not belong"):
            pool.release(stranger)
        other.release(stranger)
    pool.close()
    with pytest.raises(SandboxClosedError):
        pool.acquire(timeout_s=1)


def test_pool_grows_on_demand_up_to_max_size(config):
    with SessionPool(config, size=1, max_size=3) as pool:
        held = [pool.acquire(timeout_s=30) for _ in range(3)]
        assert len({id(session) for session in held}) == 3
        assert pool.size == 3
        with pytest.raises(SandboxStartError, match=r"at most 3\)"):
            pool.acquire(timeout_s=0.5)
        for session in held:
            pool.release(session)
        again = [pool.acquire(timeout_s=30) for _ in range(3)]
        assert pool.size == 3  # released sessions are reused, not added to
        for session in again:
            pool.release(session)


def test_max_size_below_size_is_refused(config):
    with pytest.raises(SandboxError, match="max_size"):
        SessionPool(config, size=3, max_size=2)


def test_episodes_may_hold_more_sessions_than_the_pool_starts_with():
    """An episode keeps its session until it ends: the rollout holds one per episode in flight,
    and a pool that stopped at its warm size would deadlock the env threads that wait on it."""
    from envs.sandbox_pool import POOL_SIZES, shared_pool

    pool = shared_pool(config_for("bwrap"), purpose="episodes")
    held = [pool.acquire(timeout_s=30) for _ in range(POOL_SIZES["episodes"] * 2 + 1)]
    assert len({id(session) for session in held}) == len(held)
    for session in held:
        pool.release(session)


def test_callers_arriving_together_at_a_warm_pool_each_get_a_session(config):
    """Growth counts callers, not the ready queue: eight threads arriving while the two warm
    sessions are ready must not all decide that no new session is needed."""
    with SessionPool(config, size=2, max_size=8) as pool:
        deadline = time.monotonic() + 60
        while pool.ready < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        barrier = threading.Barrier(8)
        got: list = []

        def take() -> None:
            barrier.wait()
            got.append(pool.acquire(timeout_s=60))

        threads = [threading.Thread(target=take) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(90)
        assert len({id(session) for session in got}) == 8
        for session in got:
            pool.release(session)
