"""Joining or starting Ray for a run, and leaving nothing behind when it ends."""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any

from agent_rl.orchestrate.actor_pool import PipelineError
from agent_rl.train_config import TrainConfig

logger = logging.getLogger(__name__)

RAY_CONNECT_TIMEOUT_S = 5.0
WORKER_LOGS = "worker_logs"


class RayUnreachableError(PipelineError):
    """`ray_address` names a Ray cluster that does not answer."""


def init_ray(config: TrainConfig) -> bool:
    """Join `ray_address` or start a local Ray; True if this call connected (so the run must
    disconnect when it ends), False if Ray was already up in this process.

    ray.init retries an unreachable address for minutes; a plain TCP probe fails in seconds.
    """
    import ray

    if ray.is_initialized():
        return False
    quiet = {} if config.pipeline.show_worker_logs else {"log_to_driver": False,
                                                 "logging_level": logging.WARNING}
    address = config.pipeline.ray_address
    if address:
        check_ray_address(address)
        ray.init(address=address, **quiet)
    else:
        # The learner's ranks after rank 0 are Ray actors too, a CPU each beside the rollout's.
        ray.init(num_cpus=config.pipeline.ray_num_cpus + config.learner.world_size - 1,
                 include_dashboard=False, **quiet)
    _link_worker_logs(Path(config.out_dir))
    return True


def _link_worker_logs(run_dir: Path) -> None:
    """run_dir/worker_logs points at this Ray session's log folder (actors' and vLLM's output)."""
    from ray._private.worker import _global_node

    if _global_node is None:
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    link = run_dir / WORKER_LOGS
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(_global_node.get_logs_dir_path(), target_is_directory=True)


def check_ray_address(address: str) -> None:
    """Raise RayUnreachableError unless something listens at `address` ("auto" is not probed)."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=RAY_CONNECT_TIMEOUT_S).close()
    except (OSError, ValueError) as error:
        raise RayUnreachableError(
            f"no Ray cluster answers at ray_address {address!r} ({error}); start one with "
            "`ray start --head`, fix the address (host:port), or remove ray_address to run "
            "a local Ray"
        ) from error


def stop_ray(descendants: list[Any]) -> None:
    """Shut Ray down, then stop what is left of the processes below this one (vLLM's engine
    processes would otherwise outlive a killed actor)."""
    import ray

    ray.shutdown()
    _stop_processes(descendants)


def descendant_processes() -> list[Any]:
    import psutil

    return psutil.Process().children(recursive=True)


def _stop_processes(processes: list[Any], grace_s: float = 5.0) -> None:
    """Terminate what is still running of `processes`, then kill what ignores that."""
    import psutil

    alive = [p for p in processes if p.is_running()]
    for process in alive:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            pass
    _, stubborn = psutil.wait_procs(alive, timeout=grace_s)
    for process in stubborn:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    if alive:
        logger.info("stopped %d leftover child process(es)", len(alive))
