"""What the learner trains on: trajectories cut into samples (the sampled tokens' positions,
behavior logprobs and versions), packed into micro-batches, and which of their tokens are lag 0."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from agent_rl.learn.errors import LearnerError
from agent_rl.trajectory import LAG0_EXCLUDED_TURNS, Trajectory


@dataclass
class Sample:
    """One response cut for training: position t of the arrays predicts token t+1."""

    token_ids: torch.Tensor  # (T,) the whole episode: prompt, model turns, tool results
    model_positions: torch.Tensor  # (N,) positions in the (T-1,) logprob row that were sampled
    behavior_logprobs: torch.Tensor  # (N,) what the rollout recorded for those tokens
    policy_versions: torch.Tensor  # (N,) the policy version that sampled each token
    advantage: float
    needs_grad: bool = True  # False: forwarded for the IS/KL metrics only (a flat group)
    # model positions where a turn begins whose tokens carry a version but whose context was
    # prefilled with older weights: not lag 0 (`lag0_tokens`)
    lag0_excluded_turn_starts: tuple[int, ...] = ()
    group: int = -1  # index of its group in the update: responses to one prompt share a prefix
    weight: float = 1.0  # its share of a response's vote: 1/n for each of an episode's n segments

    @classmethod
    def from_trajectory(cls, trajectory: Trajectory, advantage: float) -> Sample:
        mask = torch.tensor(trajectory.loss_mask[1:], dtype=torch.bool)
        if trajectory.loss_mask[0]:
            raise LearnerError(
                f"trajectory of task {trajectory.task_id} marks its first token as sampled; the "
                "first token is always prompt (loss_mask[0] must be 0)"
            )
        positions = mask.nonzero().squeeze(-1)
        versions = torch.tensor(trajectory.policy_versions[1:], dtype=torch.long)[positions]
        if (versions < 0).any():
            raise LearnerError(
                f"trajectory of task {trajectory.task_id} has sampled tokens with policy version "
                "-1; the rollout must record the version that sampled each model token"
            )
        return cls(
            token_ids=torch.tensor(trajectory.token_ids, dtype=torch.long),
            model_positions=positions,
            behavior_logprobs=torch.tensor(trajectory.behavior_logprobs[1:], dtype=torch.float64)[
                positions
            ],
            policy_versions=versions,
            advantage=advantage,
            lag0_excluded_turn_starts=tuple(
                index - 1 for index in trajectory.info.get(LAG0_EXCLUDED_TURNS, ())
            ),
        )

    @property
    def num_tokens(self) -> int:
        return self.token_ids.numel()


def micro_batches(samples: list[Sample], token_budget: int) -> Iterator[list[Sample]]:
    """Consecutive runs of samples whose tokens fit the budget (a longer sample goes alone)."""
    batch: list[Sample] = []
    tokens = 0
    for sample in samples:
        if batch and tokens + sample.num_tokens > token_budget:
            yield batch
            batch, tokens = [], 0
        batch.append(sample)
        tokens += sample.num_tokens
    if batch:
        yield batch


def lag0_tokens(positions: torch.Tensor, versions: torch.Tensor, version: int,
                excluded_turn_starts: Sequence[int] = ()) -> torch.Tensor:
    """The lag-0 tokens: sampled with weights `version` in a turn that began with them.

    A weight update lands while turns are in flight: the turn goes on with the new weights, and
    its later tokens carry the new version, but its context's KV was computed by the older
    ones, so the learner's fresh forward differs from them by the weight change, not by the
    kernels. A turn is a run of consecutive model positions; requests are salted by version,
    so a turn that began on `version` computed its whole context with it, unless its prefill
    began before the update landed: the rollout names those turns (`excluded_turn_starts`).
    """
    starts = torch.ones_like(positions, dtype=torch.bool)
    starts[1:] = positions[1:] != positions[:-1] + 1
    turn_index = starts.long().cumsum(0) - 1
    turn_ok = versions[starts] == version
    if excluded_turn_starts:
        turn_ok &= ~torch.isin(positions[starts], torch.tensor(excluded_turn_starts))
    return (versions == version) & turn_ok[turn_index]
