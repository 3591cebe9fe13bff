"""The one record that crosses from rollout to learner.

A trajectory is token ids from the start: the rollout appends exactly the ids it sampled or fed,
so the learner never re-tokenizes text. Every per-token list has the same length as `token_ids`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# How an episode ended (`Trajectory.end_reason`).
END_TERMINATED = "terminated"
END_TRUNCATED = "truncated"
END_CONTEXT_BUDGET = "context_budget"
END_ENV_ERROR = "env_error"  # the env or a tool raised: the episode has no verdict
# `info` key: the first token index of each turn whose prompt older weights may have prefilled;
# its tokens carry the new version but are not lag 0 (`agent_rl.learn.samples.lag0_tokens`)
LAG0_EXCLUDED_TURNS = "lag0_excluded_turns"
# `info` key: the episode's tool calls (`tool_calls`)
TOOL_CALLS = "tool_calls_total"
# `info` key of a trajectory that is one segment of an episode of several (an agent rewrote its
# history, `rollout.agent_history: new_segment`): {"index": j, "count": n}, the segments in order
# in their group. Every segment carries the episode's reward; the last one its end and totals.
SEGMENT = "segment"


def ends_episode(trajectory: Trajectory) -> bool:
    """True for a whole episode and for the last segment of one: the trajectory that carries
    how the episode ended and its totals (turns, tool calls)."""
    segment = trajectory.info.get(SEGMENT)
    return not segment or segment["index"] == segment["count"] - 1


def tool_calls(trajectory: Trajectory) -> int:
    """The episode's tool calls: well-formed calls the env ran, of tools other than the final
    `answer`. Training's charts and evaluation's reports both count these; a malformed attempt
    is a format failure, counted by the format penalty, not a tool call."""
    return int(trajectory.info.get(TOOL_CALLS, 0))


@dataclass
class Trajectory:
    """One episode of one task, as the learner will train on it.

    Per-token fields are aligned with `token_ids`. For prompt and environment tokens
    (`loss_mask == 0`) the behavior logprob is 0.0 and the policy version is -1: they were fed,
    not sampled, so no policy produced them.
    """

    task_id: str
    group_id: str
    token_ids: list[int]
    loss_mask: list[int]
    behavior_logprobs: list[float]
    policy_versions: list[int]
    reward: float
    num_turns: int
    end_reason: str
    category: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    sampling: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.token_ids)
        lengths = {
            "loss_mask": len(self.loss_mask),
            "behavior_logprobs": len(self.behavior_logprobs),
            "policy_versions": len(self.policy_versions),
        }
        bad = {name: size for name, size in lengths.items() if size != n}
        if bad:
            raise ValueError(f"per-token fields must have {n} entries like token_ids, got {bad}")

    @property
    def num_model_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def oldest_version(self) -> int:
        """The oldest policy version among sampled tokens (-1 if the model sampled nothing)."""
        sampled = [v for v, m in zip(self.policy_versions, self.loss_mask, strict=True) if m]
        return min(sampled) if sampled else -1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        return cls(**data)


@dataclass
class Group:
    """The G trajectories sampled for one task; the unit the learner takes and the ledger counts."""

    group_id: str
    task_id: str
    trajectories: list[Trajectory]

    @property
    def rewards(self) -> list[float]:
        """One reward per episode (a segmented episode's once), in episode order."""
        return [t.reward for t in self.episode_ends]

    @property
    def episode_ends(self) -> list[Trajectory]:
        """The trajectories that end an episode: all of them unless an agent's episode was
        recorded in segments (`SEGMENT`)."""
        return [t for t in self.trajectories if ends_episode(t)]

    def episode_of_each(self) -> list[int]:
        """The episode (an index into `rewards`) of each trajectory."""
        episodes, episode = [], -1
        for trajectory in self.trajectories:
            segment = trajectory.info.get(SEGMENT)
            episode += not segment or segment["index"] == 0
            episodes.append(episode)
        return episodes

    @property
    def oldest_version(self) -> int:
        versions = [t.oldest_version for t in self.trajectories if t.oldest_version >= 0]
        return min(versions) if versions else -1

    def to_dict(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "task_id": self.task_id,
            "trajectories": [trajectory.to_dict() for trajectory in self.trajectories],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Group:
        return cls(
            group_id=data["group_id"],
            task_id=data["task_id"],
            trajectories=[Trajectory.from_dict(t) for t in data["trajectories"]],
        )


def exceeds_max_lag(sampled_version: int, trained_version: int, max_lag: int) -> bool:
    """The lag rule, the one place it is written: a token sampled by weights `sampled_version`
    may not be trained in the update from `trained_version` when the gap exceeds `max_lag`."""
    return trained_version - sampled_version > max_lag


def group_lag(group: Group, learner_version: int) -> int:
    """The largest lag any sampled token of `group` would have in the update from this version."""
    oldest = group.oldest_version
    return 0 if oldest < 0 else learner_version - oldest
