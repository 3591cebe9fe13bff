"""A pool of started sessions, so an episode gets one without paying the start-up.

`release` hands a session to a background thread that resets it (a fresh kernel, see
`Session.reset`) before it is offered again; `acquire` only ever returns clean sessions.

The pool starts `size` sessions ahead of use and, when every session is held or promised to a
waiting caller, starts one more, up to `max_size`. Callers that hold a session across awaits (an
episode keeps its interpreter until it ends) need as many sessions as they have episodes in
flight: a fixed pool smaller than that serialises the episodes, and deadlocks when the threads
that would release are the ones waiting.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Iterator
from types import TracebackType

from sandbox.config import SandboxConfig
from sandbox.errors import SandboxClosedError, SandboxError, SandboxStartError
from sandbox.session import Session, _in_thread

__all__ = ["SessionPool"]

logger = logging.getLogger(__name__)


class SessionPool:
    """`size` sessions started ahead of use, up to `max_size` on demand, recycled on release.

    Thread-safe. `max_size` defaults to `size`: a fixed pool.
    """

    def __init__(self, config: SandboxConfig | None = None, size: int = 4,
                 max_size: int | None = None) -> None:
        if size < 1:
            raise SandboxError(f"SessionPool size must be at least 1, got {size}")
        if max_size is not None and max_size < size:
            raise SandboxError(f"SessionPool max_size ({max_size}) is below its size ({size})")
        self.config = config if config is not None else SandboxConfig()
        self.size = size
        self.max_size = max_size if max_size is not None else size
        self._ready: queue.Queue[Session] = queue.Queue()
        self._to_recycle: queue.Queue[Session | None] = queue.Queue()
        self._lock = threading.Lock()
        self._sessions: set[Session] = set()
        self._claimed = 0  # callers holding or waiting for a session
        self._closed = False
        self._last_error: BaseException | None = None
        self._worker = threading.Thread(target=self._recycle_loop, name="sandbox-pool",
                                        daemon=True)
        self._worker.start()
        for _ in range(size):
            self._to_recycle.put(None)

    def __repr__(self) -> str:
        return (f"SessionPool(backend={self.config.backend!r}, size={self.size},"
                f" max_size={self.max_size}, ready={self._ready.qsize()})")

    @property
    def ready(self) -> int:
        """Sessions waiting to be handed out right now."""
        return self._ready.qsize()

    def _recycle_loop(self) -> None:
        """Starts missing sessions and resets released ones, one at a time: on a small machine
        parallel starts only slow each other down."""
        while True:
            session = self._to_recycle.get()
            if self._closed:
                if session is not None:
                    session.close()
                return
            try:
                if session is None:
                    session = Session(self.config)
                    with self._lock:
                        self._sessions.add(session)
                else:
                    session.reset()
            except (SandboxError, OSError) as error:
                logger.warning("sandbox pool could not prepare a session: %s", error)
                self._last_error = error
                if session is not None:
                    self._forget(session)
                self._ready.put_nowait(_Failure(error))  # type: ignore[arg-type]
                continue
            if self._closed:
                session.close()
                return
            self._ready.put(session)

    def _forget(self, session: Session) -> None:
        with self._lock:
            self._sessions.discard(session)
        session.close()

    def acquire(self, timeout_s: float | None = None) -> Session:
        """A clean session; waits while one is started or reset for this caller, or, at
        `max_size`, until one is released.

        Raises:
            SandboxStartError: a session could not be started (the pool tries again on the
                next acquire), or none became free within `timeout_s`.
            SandboxClosedError: the pool is closed.
        """
        if self._closed:
            raise SandboxClosedError("this SessionPool is closed")
        self._claim()
        try:
            item = self._ready.get(timeout=timeout_s)
        except queue.Empty as error:
            self._unclaim()
            raise SandboxStartError(
                f"no sandbox session became free within {timeout_s} s (pool size {self.size},"
                f" at most {self.max_size}); release sessions after use or raise max_size"
            ) from error
        if isinstance(item, _Failure):
            self._unclaim()
            if isinstance(item.error, SandboxClosedError):
                self._ready.put(item)  # wake the next waiter too
                raise SandboxClosedError("this SessionPool is closed") from item.error
            self._to_recycle.put(None)
            raise SandboxStartError(f"the pool could not start a session: {item.error}") \
                from item.error
        if self._closed:
            item.close()
            raise SandboxClosedError("this SessionPool is closed")
        return item

    def _claim(self) -> None:
        """Count one more caller holding or awaiting a session; start a session for it when
        every session is already spoken for and the pool may still grow."""
        with self._lock:
            self._claimed += 1
            grow = self._claimed > self.size and self.size < self.max_size
            if grow:
                self.size += 1
        if grow:
            self._to_recycle.put(None)

    def _unclaim(self) -> None:
        with self._lock:
            self._claimed -= 1

    async def aacquire(self, timeout_s: float | None = None) -> Session:
        """`acquire` without blocking the event loop."""
        return await _in_thread(self.acquire, timeout_s)

    def release(self, session: Session) -> None:
        """Give a session back; it is reset before anyone gets it again."""
        with self._lock:
            owned = session in self._sessions
            if owned:
                self._claimed -= 1
        if not owned:
            raise SandboxError(f"{session!r} does not belong to this pool")
        if self._closed:
            self._forget(session)
            return
        if session.closed:
            # Closed by its user: replace it so the pool keeps its size.
            self._forget(session)
            self._to_recycle.put(None)
            return
        self._to_recycle.put(session)

    async def arelease(self, session: Session) -> None:
        """`release` for async code (it never blocks, the reset runs in the background)."""
        self.release(session)

    @contextlib.contextmanager
    def session(self, timeout_s: float | None = None) -> Iterator[Session]:
        """`with pool.session() as s:` acquires and always releases."""
        session = self.acquire(timeout_s)
        try:
            yield session
        finally:
            self.release(session)

    @contextlib.asynccontextmanager
    async def asession(self, timeout_s: float | None = None):  # noqa: ANN201
        """`async with pool.asession() as s:` acquires and always releases."""
        session = await self.aacquire(timeout_s)
        try:
            yield session
        finally:
            self.release(session)

    def close(self) -> None:
        """Close every session, in use or not. Safe to call twice."""
        self._closed = True
        with self._lock:
            sessions, self._sessions = list(self._sessions), set()
        for session in sessions:
            session.close()
        self._to_recycle.put(None)
        self._ready.put(_Failure(SandboxClosedError("this SessionPool is closed")))  # type: ignore[arg-type]

    async def aclose(self) -> None:
        await _in_thread(self.close)

    def __enter__(self) -> SessionPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> SessionPool:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.aclose()


class _Failure:
    """Put in the ready queue in place of a session that could not be started."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
