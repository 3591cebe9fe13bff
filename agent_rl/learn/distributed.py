"""The data-parallel learner's collective parts: the process group, which rank trains which
groups, and the one gradient all-reduce per update.

Every rank holds the whole model and the same optimizer state, so the forward that recomputes a
sample's logprobs is the very forward a single learner runs (the same bits whatever the world
size) and rank 0's state is the full state a checkpoint saves. Ranks differ only in which groups
they forward; their gradients are summed once per update, before the norm is taken and the step.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from agent_rl.trajectory import Group

# Collectives wait this long for a slow rank before they fail: an update on a big batch can take
# minutes, and a rank that died makes gloo fail at once anyway.
COLLECTIVE_TIMEOUT = timedelta(minutes=30)
# Joining waits only for the ranks' processes to start and import torch; a rank that died before
# it joined must not hold rank 0 for the collectives' half hour.
JOIN_TIMEOUT = timedelta(minutes=3)


@dataclass(frozen=True)
class Layout:
    """Where the learner's ranks run, as `agent-rl train` prints it once."""

    world_size: int
    backend: str  # gloo on the CPU, nccl on CUDA
    devices: tuple[str, ...]  # rank r's device, as that rank's process sees it

    def describe(self) -> str:
        if self.world_size == 1:
            return f"learner: 1 rank ({self.backend}) on {self.devices[0]}"
        others = "1" if self.world_size == 2 else f"1..{self.world_size - 1}"
        each = ", one Ray-assigned GPU each" if self.backend == "nccl" else ""
        actors = "Ray actors" if self.world_size > 2 else "a Ray actor"
        return (f"learner: {self.world_size} ranks ({self.backend}): rank 0 on "
                f"{self.devices[0]} in this process, rank{'s' if self.world_size > 2 else ''} "
                f"{others} as {actors} on {self.devices[1]}{each}")


def layout(world_size: int, device: str) -> Layout:
    """The ranks' devices and backend for `learner.world_size` and `learner.device`. With CUDA,
    rank 0 takes `device` in this process and every other rank is a Ray actor asking Ray for
    one GPU, which that actor sees as cuda:0."""
    if device.startswith("cuda"):
        return Layout(world_size, "nccl", (device,) + ("cuda:0",) * (world_size - 1))
    return Layout(world_size, "gloo", (device,) * world_size)


def free_port() -> int:
    """A TCP port free on this host now, for the ranks' rendezvous (open on every interface:
    ranks on other nodes connect to it)."""
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def join_process_group(rank: int, ranks: Layout, address: str, port: int) -> None:
    """Join the ranks' process group as `rank`; rank 0 holds the rendezvous at `address:port`
    (its own host). Every rank calls this; it returns when all have. With NCCL the rank's GPU
    becomes the current one first: NCCL's object collectives use the current device."""
    if ranks.backend == "nccl":
        torch.cuda.set_device(ranks.devices[rank])
    store = dist.TCPStore(address, port, ranks.world_size, is_master=rank == 0,
                          timeout=JOIN_TIMEOUT)
    dist.init_process_group(ranks.backend, store=store, rank=rank, world_size=ranks.world_size,
                            timeout=COLLECTIVE_TIMEOUT)


def leave_process_group() -> None:
    """Leave the process group if in one, so that a new one can be joined."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def rank_and_world_size() -> tuple[int, int]:
    """This process's rank and the world size; (0, 1) outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def group_tokens(group: Group) -> int:
    """A group's forward cost in tokens, for balancing."""
    return sum(len(trajectory.token_ids) for trajectory in group.trajectories)


def split_groups(groups: list[Group], world_size: int) -> list[list[int]]:
    """The indices of the groups each rank trains: whole groups (a group's shared-prompt pass
    stays on one rank), balanced by tokens.

    Largest group first to the rank with the fewest tokens so far (ties: the lower rank), each
    rank's indices in update order. Deterministic, so every rank computes the same split from the
    same batch without talking to the others.
    """
    shares: list[list[int]] = [[] for _ in range(world_size)]
    loads = [0] * world_size
    by_size = sorted(range(len(groups)), key=lambda index: -group_tokens(groups[index]))
    for index in by_size:
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        shares[rank].append(index)
        loads[rank] += group_tokens(groups[index])
    return [sorted(share) for share in shares]


def all_reduce_gradients(parameters: list[torch.nn.Parameter]) -> None:
    """Sum every parameter's gradient over the ranks, in place, as one flat buffer.

    A rank whose share gave a parameter no gradient contributes zeros; a parameter no rank gave
    a gradient stays without one (as in a single learner, the optimizer then skips it), so each
    buffer carries one presence count per parameter. Every rank ends with the same bits.
    """
    reference = parameters[0]
    present = torch.tensor([float(p.grad is not None) for p in parameters],
                           device=reference.device)
    flat = torch.cat([present, *(
        (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).to(torch.float32)
        for p in parameters
    )])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = len(parameters)
    for index, param in enumerate(parameters):
        size = param.numel()
        if flat[index] > 0:
            param.grad = flat[offset:offset + size].view_as(param).to(param.dtype)
        else:
            param.grad = None
        offset += size


def gather_to_all(value: Any) -> list[Any]:
    """Every rank's `value`, in rank order, on every rank (a picklable object; [value] alone)."""
    _, world_size = rank_and_world_size()
    if world_size == 1:
        return [value]
    gathered: list[Any] = [None] * world_size
    dist.all_gather_object(gathered, value)
    return gathered
