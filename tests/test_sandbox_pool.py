"""SessionPool on the real bubblewrap backend: hand-out, recycling, bounds, async acquire."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time

import pytest

from sandbox import SandboxClosedError, SandboxConfig, SandboxError, SandboxStartError, SessionPool

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None,
                                reason="bubblewrap (bwrap) is not installed on this machine")

CONFIG = SandboxConfig(backend="bwrap", timeout_s=2.0, memory_mb=256, max_processes=32)


@pytest.fixture
def pool():
    with SessionPool(CONFIG, size=2) as pool:
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


def test_pooled_acquire_is_fast_once_warm(pool):
    for session in [pool.acquire(timeout_s=10), pool.acquire(timeout_s=10)]:
        pool.release(session)
    time.sleep(0.5)
    started = time.monotonic()
    session = pool.acquire(timeout_s=10)
    assert time.monotonic() - started < 0.01
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


def test_foreign_session_is_refused_and_closed_pool_refuses(pool):
    with SessionPool(CONFIG, size=1) as other:
        stranger = other.acquire(timeout_s=10)
        with pytest.raises(SandboxError, match="does not belong"):
            pool.release(stranger)
        other.release(stranger)
    pool.close()
    with pytest.raises(SandboxClosedError):
        pool.acquire(timeout_s=1)
