"""The learner's update against plain REINFORCE, on the tiny real model."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from agent_rl.learn.advantages import group_advantages
from agent_rl.learn.checkpoint import load_checkpoint, save_checkpoint
from agent_rl.learn.config import LearnerConfig
from agent_rl.learn.learner import Learner, LearnerError
from agent_rl.learn.samples import Sample
from agent_rl.orchestrate.ledger import Ledger
from agent_rl.orchestrate.run_state import RunState
from agent_rl.trajectory import SEGMENT, Group, Trajectory

# prompt (fed), a model turn, a tool result (fed), a second model turn
SEGMENTS = [(0, 6), (1, 9), (0, 5), (1, 7)]


def _learner(model_dir: Path, matched_kernels: bool = False, **overrides: object) -> Learner:
    config = LearnerConfig.model_validate({"lr": 1e-3, **overrides})
    return Learner(model_dir, config, matched_kernels=matched_kernels)


def _trajectory(
    learner: Learner, rng: random.Random, reward: float, version: int = 0, shift: float = 0.0
) -> Trajectory:
    """An episode whose behavior logprobs are the learner's own (on-policy) plus `shift`."""
    token_ids, loss_mask = [], []
    for sampled, length in SEGMENTS:
        token_ids += [rng.randrange(5, 2000) for _ in range(length)]
        loss_mask += [sampled] * length
    logprobs = [0.0, *learner.token_logprobs(token_ids).tolist()]
    return Trajectory(
        task_id="task",
        group_id="g",
        token_ids=token_ids,
        loss_mask=loss_mask,
        behavior_logprobs=[lp + shift if m else 0.0 for lp, m in zip(logprobs, loss_mask, strict=True)],
        policy_versions=[version if m else -1 for m in loss_mask],
        reward=reward,
        num_turns=2,
        end_reason="terminated",
    )


def _groups(learner: Learner, seed: int = 0, version: int = 0) -> list[Group]:
    rng = random.Random(seed)
    rewards = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.5, 1.0]]
    return [
        Group(f"g{i}", "task", [_trajectory(learner, rng, r, version) for r in group_rewards])
        for i, group_rewards in enumerate(rewards)
    ]


def _grads(learner: Learner) -> list[torch.Tensor]:
    return [p.grad.clone() for p in learner.parameters if p.grad is not None]


def test_on_policy_step_equals_plain_reinforce_gradient(tiny_model: Path) -> None:
    learner = _learner(tiny_model)
    groups = _groups(learner)
    metrics = learner.accumulate_gradients(groups)
    ours = _grads(learner)
    assert metrics["is/max"] == metrics["is/min"] == 1.0
    assert metrics["is/lag0_max_abs_log"] == 0.0 and metrics["is/lag0_tokens"] > 0

    # Reference: autograd of -(1/N) sum_i A_i * mean_t logp_it over model tokens.
    learner.optimizer.zero_grad(set_to_none=True)
    trajectories = [t for g in groups for t in g.trajectories]
    advantages = [a for g in groups for a in group_advantages(g.rewards)]
    reference = torch.zeros(())
    for trajectory, advantage in zip(trajectories, advantages, strict=True):
        ids = torch.tensor(trajectory.token_ids)
        mask = torch.tensor(trajectory.loss_mask[1:], dtype=torch.bool)
        logprobs = learner.policy.token_logprobs(ids)[mask]
        reference = reference - advantage * logprobs.mean()
    (reference / len(trajectories)).backward()
    theirs = _grads(learner)

    assert len(ours) == len(theirs) > 0
    for mine, plain in zip(ours, theirs, strict=True):
        torch.testing.assert_close(mine, plain, rtol=1e-5, atol=1e-9)


def test_micro_batch_budget_does_not_change_the_gradient(tiny_model: Path) -> None:
    one_batch = _learner(tiny_model, micro_batch_tokens=100_000)
    groups = _groups(one_batch)
    one_batch.accumulate_gradients(groups)
    tiny_batches = _learner(tiny_model, micro_batch_tokens=1)
    tiny_batches.accumulate_gradients(groups)
    for a, b in zip(_grads(one_batch), _grads(tiny_batches), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-9)


def test_an_episode_in_segments_counts_once_with_its_episodes_advantage(
        tiny_model: Path) -> None:
    """An agent episode recorded as two segments (SEGMENT) shares one advantage, computed
    against the other episodes' rewards, and one vote: two identical halves of an episode give
    the gradient of that episode recorded whole."""
    learner = _learner(tiny_model)
    rng = random.Random(3)
    whole, other, third = (_trajectory(learner, rng, reward) for reward in (1.0, 0.0, 0.0))
    halves = [Trajectory.from_dict({**whole.to_dict(), "info": {SEGMENT: {"index": i, "count": 2}}})
              for i in range(2)]
    segmented = Group("g", "task", [*halves, other, third])
    assert segmented.rewards == [1.0, 0.0, 0.0]
    assert segmented.episode_of_each() == [0, 0, 1, 2]

    learner.accumulate_gradients([Group("g", "task", [whole, other, third])])
    expected = _grads(learner)
    learner.optimizer.zero_grad(set_to_none=True)
    metrics = learner.accumulate_gradients([segmented])
    assert metrics["charts/responses"] == 3 and metrics["charts/reward_mean"] == pytest.approx(1 / 3)
    for mine, reference in zip(_grads(learner), expected, strict=True):
        torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-9)


def test_flat_group_gives_no_gradient_but_is_counted_and_measured(tiny_model: Path) -> None:
    learner = _learner(tiny_model)
    rng = random.Random(1)
    flat = Group("flat", "task", [_trajectory(learner, rng, 1.0) for _ in range(3)])
    result = learner.train_step([flat])
    metrics = result.metrics
    assert result.flat_groups == metrics["charts/zero_variance_groups"] == 1
    assert metrics["charts/trained_responses"] == 0
    assert metrics["losses/grad_norm"] == 0.0
    assert metrics["is/tokens"] == 3 * 16  # measured all the same
    assert learner.version == 1


def test_lag_is_counted_in_updates_per_token(tiny_model: Path) -> None:
    learner = _learner(tiny_model)
    groups = _groups(learner)
    for _ in range(3):
        learner.train_step(groups)
    rng = random.Random(2)
    old = Group("old", "task", [_trajectory(learner, rng, r, version=1) for r in (0.0, 1.0)])
    result = learner.train_step([old])
    metrics = result.metrics
    assert metrics["lag/hist"] == {"2": 32}
    assert result.lag_max == metrics["lag/max"] == 2
    assert result.version == 4 and result.tokens == 2 * 27
    assert metrics["is/lag0_tokens"] == 0  # every token is 2 updates old
    assert metrics["is/max"] > 0  # weights are computed against the stored behavior logprobs


def test_importance_weights_follow_the_behavior_logprobs(tiny_model: Path) -> None:
    learner = _learner(tiny_model)
    rng = random.Random(3)
    shifted = [_trajectory(learner, rng, r, shift=-0.5) for r in (0.0, 1.0)]
    metrics = learner.accumulate_gradients([Group("s", "task", shifted)])
    assert metrics["is/median"] == pytest.approx(torch.e**0.5, rel=1e-5)
    assert metrics["is/kl_k3"] == pytest.approx(torch.e**0.5 - 1 - 0.5, rel=1e-4)


def test_tokens_newer_than_the_learner_are_refused(tiny_model: Path) -> None:
    learner = _learner(tiny_model)
    rng = random.Random(4)
    future = Group("f", "task", [_trajectory(learner, rng, r, version=5) for r in (0.0, 1.0)])
    with pytest.raises(LearnerError, match="newer than the learner"):
        learner.train_step([future])


def test_checkpoint_resume_continues_the_same_run(tiny_model: Path, tmp_path: Path) -> None:
    learner = _learner(tiny_model)
    groups = _groups(learner)
    learner.train_step(groups)
    ledger = Ledger()
    for group in groups:
        ledger.record_generated(group.group_id)
        ledger.record_trained(group.group_id)
    ledger.record_generated("queued")
    queued = Group("queued", "task", groups[0].trajectories)
    state = RunState(next_task_index=7, in_flight_task_indices=[5, 6], queued_groups=[queued],
                     ledger=ledger)
    path = save_checkpoint(tmp_path, learner.state_dict(), state.to_dict())
    expected_noise = torch.rand(3)
    learner.train_step(groups)
    expected = [p.detach().clone() for p in learner.parameters]

    resumed = _learner(tiny_model)
    learner_state, saved = load_checkpoint(path)
    restored = RunState.from_dict(saved)
    resumed.load_state_dict(learner_state)
    assert torch.equal(torch.rand(3), expected_noise)  # RNG restored
    assert resumed.version == 1
    resumed.train_step(groups)
    for a, b in zip(expected, resumed.parameters, strict=True):
        assert torch.equal(a, b.detach())
    assert restored.next_task_index == 7
    assert restored.in_flight_task_indices == [5, 6]
    assert restored.queued_groups[0].trajectories == queued.trajectories
    restored.ledger.check(pending={"queued"})


def _shared_prompt_groups(learner: Learner) -> list[Group]:
    """Two groups, each of responses to one prompt (the same leading tokens), on-policy."""
    rng = random.Random(5)
    groups = []
    for g, rewards in enumerate([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.5]]):
        prompt = [rng.randrange(5, 2000) for _ in range(20)]
        trajectories = []
        for reward in rewards:
            trajectory = _trajectory(learner, rng, reward)
            trajectory.token_ids[:20] = prompt
            trajectory.loss_mask[:20] = [0] * 20
            trajectory.policy_versions[:20] = [-1] * 20
            logprobs = [0.0, *learner.token_logprobs(trajectory.token_ids).tolist()]
            trajectory.behavior_logprobs = [
                lp if m else 0.0 for lp, m in zip(logprobs, trajectory.loss_mask, strict=True)
            ]
            trajectories.append(trajectory)
        groups.append(Group(f"g{g}", "task", trajectories))
    return groups


@pytest.mark.parametrize("differ_at", [None, 12, 3])
def test_shared_prompt_pass_keeps_logprobs_bitwise_and_the_gradient(
    tiny_model: Path, differ_at: int | None
) -> None:
    # differ_at: the third response's prompt differs there, so less (or nothing) is shared.
    grads = []
    for share in (False, True):
        learner = _learner(tiny_model, matched_kernels=True, share_prompt=share)
        groups = _shared_prompt_groups(learner)
        if differ_at is not None:
            trajectory = groups[1].trajectories[2]
            trajectory.token_ids[differ_at] = (trajectory.token_ids[differ_at] + 1) % 2000
            logprobs = [0.0, *learner.token_logprobs(trajectory.token_ids).tolist()]
            trajectory.behavior_logprobs = [
                lp if m else 0.0 for lp, m in zip(logprobs, trajectory.loss_mask, strict=True)
            ]
        metrics = learner.accumulate_gradients(groups)
        # Matched kernels, lag 0: the learner recomputes the behavior logprobs exactly.
        assert metrics["is/max"] == metrics["is/min"] == 1.0
        assert metrics["forward_tokens"] > 0
        grads.append(_grads(learner))
    for separate, shared in zip(*grads, strict=True):
        torch.testing.assert_close(shared, separate, rtol=1e-4, atol=1e-7)


def test_lag0_tokens_exclude_turns_an_update_landed_in() -> None:
    """Two turns (positions 3-5 and 9-11): the first began on version 1 and finished on 2 (its
    KV is partly version 1's), the second ran on 2 throughout. Only the second is pure lag 0."""
    from agent_rl.learn.samples import lag0_tokens

    positions = torch.tensor([3, 4, 5, 9, 10, 11])
    versions = torch.tensor([1, 2, 2, 2, 2, 2])
    assert lag0_tokens(positions, versions, 2).tolist() == [False] * 3 + [True] * 3
    assert lag0_tokens(positions, versions, 1).tolist() == [True] + [False] * 5
    assert not lag0_tokens(positions, versions, 3).any()
    # The rollout saw the update land between the second turn's submission and its first token.
    assert not lag0_tokens(positions, versions, 2, excluded_turn_starts=[9]).any()
    assert lag0_tokens(positions, versions, 2, excluded_turn_starts=[3]).tolist() == (
        [False] * 3 + [True] * 3)


def test_stale_context_turns_reach_the_sample_as_logprob_positions(tiny_model: Path) -> None:
    from agent_rl.trajectory import LAG0_EXCLUDED_TURNS

    learner = _learner(tiny_model)
    trajectory = _trajectory(learner, random.Random(0), 1.0)
    trajectory.info[LAG0_EXCLUDED_TURNS] = [20]  # the second model turn starts at token 20
    sample = Sample.from_trajectory(trajectory, 1.0)
    assert sample.lag0_excluded_turn_starts == (19,)
    positions = sample.model_positions.tolist()
    assert 19 in positions and 18 not in positions  # a turn's first position


def test_warmup_ramps_the_learning_rate_and_scales_the_first_steps(tiny_model: Path) -> None:
    plain, warm = _learner(tiny_model), _learner(tiny_model, warmup_updates=4)
    start = [p.detach().clone() for p in plain.parameters]
    groups = _groups(plain)
    plain.train_step(groups)
    rates = [warm.train_step(groups).metrics["losses/lr"] for _ in range(5)]
    assert rates == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3])

    once = _learner(tiny_model, warmup_updates=4)
    once.train_step(groups)
    plain_step = torch.cat([(p.detach() - s).flatten() for p, s in zip(plain.parameters, start, strict=True)])
    warm_step = torch.cat([(p.detach() - s).flatten() for p, s in zip(once.parameters, start, strict=True)])
    # Adam's first step is lr times a gradient-free direction: a quarter of the rate, a quarter of the step.
    moved = plain_step.abs() > 1e-6
    assert torch.allclose(warm_step[moved], plain_step[moved] / 4, rtol=1e-2, atol=1e-7)


def test_bf16_learner_steps_fp32_master_weights(tiny_model: Path, tmp_path: Path) -> None:
    """At a learning rate far below a bf16 ulp the model still moves (its fp32 master weights
    accumulate the steps), keeps its dtype for the rollout, and resumes onto the same masters."""
    config = LearnerConfig(lr=1e-6)
    learner = Learner(tiny_model, config, matched_kernels=True, dtype="bfloat16")
    start = [p.detach().clone() for p in learner.parameters]
    groups = _groups(learner)
    for _ in range(3):
        learner.train_step(groups)
    assert all(p.dtype == torch.bfloat16 for p in learner.parameters)
    assert all(m.dtype == torch.float32 for m in learner.master_weights)
    masters = zip(learner.master_weights, start, strict=True)
    assert all(not torch.equal(m.detach(), s.float()) for m, s in masters)
    for param, master in zip(learner.parameters, learner.master_weights, strict=True):
        assert torch.equal(param.detach(), master.detach().to(torch.bfloat16))

    torch.save(learner.state_dict(), tmp_path / "learner.pt")
    resumed = Learner(tiny_model, config, matched_kernels=True, dtype="bfloat16")
    resumed.load_state_dict(torch.load(tmp_path / "learner.pt"))
    for mine, theirs in zip(learner.master_weights, resumed.master_weights, strict=True):
        assert torch.equal(mine.detach(), theirs.detach())


def test_stock_learner_shares_a_groups_prompt_with_the_same_gradient(tiny_model: Path) -> None:
    """Plain transformers forwards a group's prompt once too (its KV cache repeated for the
    responses): stock kernels are not batch-invariant, so the logprobs agree to rounding."""
    grads, weights = [], []
    for share in (False, True):
        learner = _learner(tiny_model, matched_kernels=False, share_prompt=share)
        metrics = learner.accumulate_gradients(_shared_prompt_groups(learner))
        weights.append((metrics["is/max"], metrics["is/min"]))
        grads.append(_grads(learner))
    assert weights[0] == (1.0, 1.0)
    assert weights[1] == pytest.approx((1.0, 1.0), abs=1e-5)
    for separate, shared in zip(*grads, strict=True):
        torch.testing.assert_close(shared, separate, rtol=1e-3, atol=1e-6)
