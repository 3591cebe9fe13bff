"""One sandbox `SessionPool` per process and purpose, shared by every env instance in it.

Starting a sandboxed interpreter costs far more than an env step, so sessions are pooled and
reused across episodes. Episodes and verification use separate pools: an env holds its episode
session while the unit-test verifier runs, and a shared pool could then wait on itself.
"""

from __future__ import annotations

import atexit
import logging
import threading
from typing import Any

from envs.errors import EnvBrokenError

__all__ = [
    "SandboxUnavailableError",
    "acquire_session",
    "close_shared_pools",
    "default_sandbox_config",
    "shared_pool",
]

logger = logging.getLogger(__name__)

# Sessions started ahead of use, per purpose. The pool grows on demand up to MAX_SESSIONS: an
# episode holds its session until it ends, so the rollout needs one per episode in flight.
POOL_SIZES = {"episodes": 4, "verify": 2}
MAX_SESSIONS = 256

_pools: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()


class SandboxUnavailableError(EnvBrokenError):
    """The `sandbox` package cannot be imported or cannot start a session here."""


def _sandbox_module() -> Any:
    try:
        import sandbox
    except ImportError as error:
        raise SandboxUnavailableError(
            f"the sandbox package is not importable ({error}); install agent-rl with its sandbox"
        ) from error
    missing = [
        name for name in ("SandboxConfig", "SandboxError", "SessionPool") if not hasattr(sandbox, name)
    ]
    if missing:
        raise SandboxUnavailableError(
            f"the sandbox package has no {missing[0]}; is it a complete agent-rl install?"
        )
    return sandbox


def default_sandbox_config() -> Any:
    """The sandbox settings the Python-tool env uses unless given its own."""
    return _sandbox_module().SandboxConfig()


def shared_pool(config: Any = None, purpose: str = "episodes", size: int | None = None) -> Any:
    """The process-wide pool for `config` and `purpose`, created on first use.

    `size` (default from `POOL_SIZES`) only matters for the call that creates the pool, which
    may then grow to `MAX_SESSIONS` while callers wait for sessions.

    Raises:
        SandboxUnavailableError: the sandbox package is missing.
    """
    sandbox = _sandbox_module()
    config = config if config is not None else default_sandbox_config()
    key = (purpose, repr(config))
    with _lock:
        pool = _pools.get(key)
        if pool is None:
            size = size or POOL_SIZES.get(purpose, 2)
            logger.info("starting sandbox pool %r of size %d", purpose, size)
            pool = sandbox.SessionPool(config, size=size, max_size=max(size, MAX_SESSIONS))
            _pools[key] = pool
        return pool


def acquire_session(config: Any = None, purpose: str = "episodes") -> tuple[Any, Any]:
    """A clean session from the shared pool, and the pool to release it to.

    Raises:
        SandboxUnavailableError: the sandbox is missing or could not start a session.
    """
    pool = shared_pool(config, purpose)
    try:
        return pool.acquire(), pool
    except _sandbox_module().SandboxError as error:
        raise SandboxUnavailableError(f"could not start a sandbox session: {error}") from error


def close_shared_pools() -> None:
    """Close every shared pool; runs at interpreter exit and is safe to call twice."""
    with _lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        try:
            pool.close()
        except Exception:  # noqa: BLE001 - closing at exit must not mask the real exit reason
            logger.exception("closing a sandbox pool failed")


atexit.register(close_shared_pools)
