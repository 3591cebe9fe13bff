"""The data-parallel learner against the single one, on the tiny real model: 2 ranks on gloo,
1 thread each, rank 1 a Ray actor on a local Ray. The forward is the same bits at any world
size; the summed gradient only reassociates a sum, so losses and weights agree to rounding. A
rank that dies is restarted from rank 0's state, and the update after is on-policy to the bit."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
import torch

from agent_rl.learn.checkpoint import load_checkpoint, save_checkpoint
from agent_rl.learn.config import LearnerConfig
from agent_rl.learn.data_parallel import DataParallelLearner
from agent_rl.learn.distributed import group_tokens, split_groups
from agent_rl.learn.learner import Learner, LearnerError
from agent_rl.trajectory import Group, Trajectory

# The ws-1 and ws-2 updates differ only in the order terms are summed (the micro-batches a rank
# packs, then the ranks' sums). The loss is a sum of fp32 per-response terms of size ~0.5 that
# cancel (advantages sum to 0 in a group) to ~1e-4, so it agrees to their rounding in absolute
# terms; the gradient norm to a few fp32 ulps; three Adam steps at lr 1e-4 carry the gradient's
# last bits into weights well inside WEIGHT_ATOL.
LOSS_ATOL = 1e-6
NORM_RTOL = 1e-5
WEIGHT_ATOL = 1e-6
STEPS = 3
OPTIONS = {"lr": 1e-4, "threads": 1, "max_grad_norm": 1.0}

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("local_ray")]


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Rank 0 runs in the test process: one thread, like rank 1."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _config(world_size: int, **options: Any) -> LearnerConfig:
    return LearnerConfig.model_validate({**OPTIONS, "world_size": world_size, **options})


def _start(model_dir: Path, world_size: int, dtype: str = "float32", **options: Any
           ) -> Learner | DataParallelLearner:
    if world_size == 1:
        return Learner(model_dir, _config(1, **options), matched_kernels=True, dtype=dtype)
    return DataParallelLearner(model_dir, _config(world_size, **options), matched_kernels=True,
                               dtype=dtype)


def _groups(learner: Learner | DataParallelLearner, seed: int) -> list[Group]:
    """Three groups of responses to their own prompts (shared-prompt passes), different
    lengths so the split has something to balance, behavior logprobs the learner's own."""
    rng = random.Random(seed)
    groups = []
    for g, (rewards, model_tokens) in enumerate([([1.0, 0.0, 0.0], 9), ([0.0, 1.0, 0.5, 1.0], 5),
                                                 ([1.0, 0.0], 14)]):
        prompt = [rng.randrange(5, 2000) for _ in range(12)]
        trajectories = []
        for reward in rewards:
            token_ids = prompt + [rng.randrange(5, 2000) for _ in range(model_tokens)]
            loss_mask = [0] * len(prompt) + [1] * model_tokens
            logprobs = [0.0, *learner.token_logprobs(token_ids).tolist()]
            trajectories.append(Trajectory(
                task_id=f"task{g}", group_id=f"g{g}", token_ids=token_ids, loss_mask=loss_mask,
                behavior_logprobs=[lp if m else 0.0 for lp, m in zip(logprobs, loss_mask,
                                                                     strict=True)],
                policy_versions=[learner.version if m else -1 for m in loss_mask],
                reward=reward, num_turns=1, end_reason="terminated",
            ))
        groups.append(Group(f"g{g}", f"task{g}", trajectories))
    return groups


def _weights(learner: Learner | DataParallelLearner) -> list[torch.Tensor]:
    rank0 = learner.rank0 if isinstance(learner, DataParallelLearner) else learner
    return [m.detach().clone() for m in rank0.master_weights]


def test_split_keeps_groups_whole_and_balances_tokens(tiny_model: Path) -> None:
    learner = _start(tiny_model, 1)
    groups = _groups(learner, seed=0)
    shares = split_groups(groups, 2)
    assert sorted(i for share in shares for i in share) == [0, 1, 2]
    assert shares == split_groups(groups, 2)  # every rank computes the same split
    loads = [sum(group_tokens(groups[i]) for i in share) for share in shares]
    sizes = sorted(group_tokens(group) for group in groups)
    assert max(loads) - min(loads) <= sizes[-1]
    assert split_groups(groups[:1], 3) == [[0], [], []]  # a rank may have nothing to forward


def test_a_world_size_the_process_group_lacks_is_refused(tiny_model: Path) -> None:
    with pytest.raises(LearnerError, match="world_size is 2"):
        Learner(tiny_model, _config(2), matched_kernels=True)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_lag0_importance_weights_are_exactly_one_at_world_size_2(tiny_model: Path,
                                                                  dtype: str) -> None:
    """Each step's groups are sampled on the current weights (built from rank 0's logprobs);
    the ones rank 1 forwards must come out the very same bits, over three steps."""
    with _start(tiny_model, 2, dtype) as learner:
        for step in range(STEPS):
            groups = _groups(learner, seed=step)
            assert all(split_groups(groups, 2))  # both ranks forward something
            metrics = learner.train_step(groups).metrics
            assert metrics["is/max"] == metrics["is/min"] == 1.0
            assert metrics["is/lag0_max_abs_log"] == 0.0
            assert metrics["is/lag0_tokens"] == metrics["is/tokens"] == 9 * 3 + 5 * 4 + 14 * 2
        assert learner.version == STEPS


def test_losses_and_weights_at_world_size_2_match_world_size_1(tiny_model: Path) -> None:
    """The same batches (sampled on the initial weights, so later steps have lag) at both
    world sizes: the loss, the global gradient norm (clipping is on) and the weights agree."""
    batches = [_groups(_start(tiny_model, 1), seed=step) for step in range(STEPS)]
    results, weights = {}, {}
    for world_size in (1, 2):
        learner = _start(tiny_model, world_size)
        try:
            results[world_size] = [learner.train_step(batch) for batch in batches]
            weights[world_size] = _weights(learner)
        finally:
            learner.close()
    for single, double in zip(results[1], results[2], strict=True):
        assert double.tokens == single.tokens
        assert double.metrics["losses/loss"] == pytest.approx(single.metrics["losses/loss"],
                                                              rel=0, abs=LOSS_ATOL)
        assert double.metrics["losses/grad_norm"] == pytest.approx(
            single.metrics["losses/grad_norm"], rel=NORM_RTOL)
    assert results[1][0].metrics["losses/grad_norm"] > OPTIONS["max_grad_norm"]  # clipped
    differences = [float((double - single).abs().max())
                   for single, double in zip(weights[1], weights[2], strict=True)]
    assert max(differences) <= WEIGHT_ATOL, differences


def test_a_checkpoint_saved_at_world_size_2_resumes_at_1_and_back(tiny_model: Path,
                                                                   tmp_path: Path) -> None:
    with _start(tiny_model, 2) as double:
        double.train_step(_groups(double, seed=0))
        saved = save_checkpoint(tmp_path / "two", double.state_dict(), {})
        saved_weights = _weights(double)
        next_batch = _groups(double, seed=1)
        double.train_step(next_batch)
        expected = _weights(double)

    single = _start(tiny_model, 1)
    single.load_state_dict(load_checkpoint(saved)[0])
    assert single.version == 1
    for mine, theirs in zip(_weights(single), saved_weights, strict=True):
        assert torch.equal(mine, theirs)
    metrics = single.train_step(next_batch).metrics
    assert metrics["is/max"] == metrics["is/min"] == 1.0
    for mine, theirs in zip(_weights(single), expected, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=WEIGHT_ATOL)

    saved_by_one = save_checkpoint(tmp_path / "one", single.state_dict(), {})
    with _start(tiny_model, 2) as resumed:
        resumed.load_state_dict(load_checkpoint(saved_by_one)[0])
        assert resumed.version == 2
        # Both ranks took the state: the groups rank 1 forwards are on-policy to the bit too.
        metrics = resumed.train_step(_groups(resumed, seed=2)).metrics
        assert metrics["is/max"] == metrics["is/min"] == 1.0


def test_an_error_on_every_rank_is_raised_as_it_is_and_stops_the_learner(
        tiny_model: Path) -> None:
    with _start(tiny_model, 2) as learner:
        groups = _groups(learner, seed=0)
        groups[0].trajectories[0].policy_versions[-1] = 5  # newer than any rank's weights
        with pytest.raises(LearnerError, match="newer than the learner"):
            learner.train_step(groups)
        with pytest.raises(LearnerError, match="have stopped \\(after an error: .*newer"):
            learner.train_step(_groups(learner, seed=1))


def _kill_rank_1(learner: DataParallelLearner) -> None:
    """Kill rank 1's process, as the kernel's OOM killer or a lost node would."""
    ray.kill(learner.rank_actors()[0], no_restart=True)


def test_a_rank_killed_between_updates_is_restarted_and_the_next_update_is_on_policy(
        tiny_model: Path) -> None:
    """The restarted rank holds rank 0's weights: the groups it forwards in the update after
    the kill are on-policy to the bit, and the run goes on one version per update."""
    with _start(tiny_model, 2) as learner:
        learner.train_step(_groups(learner, seed=0))
        killed = learner.rank_actors()[0]
        _kill_rank_1(learner)
        for step in (1, 2):
            metrics = learner.train_step(_groups(learner, seed=step)).metrics
            assert metrics["is/max"] == metrics["is/min"] == 1.0
            assert metrics["is/lag0_tokens"] == metrics["is/tokens"]
        assert learner.version == 3
        assert learner.restarts == 1
        assert learner.rank_actors()[0] != killed


def test_the_update_a_restart_retrains_matches_an_update_without_one(tiny_model: Path) -> None:
    """Rank 1 dies before an update's collectives: rank 0 trains the same batch again on the
    restarted ranks, and the weights come out as a learner's that never lost a rank."""
    batches = [_groups(_start(tiny_model, 1), seed=step) for step in range(2)]
    weights = []
    for kill in (False, True):
        with _start(tiny_model, 2) as learner:
            learner.train_step(batches[0])
            if kill:
                _kill_rank_1(learner)
            learner.train_step(batches[1])
            assert learner.version == 2 and learner.restarts == int(kill)
            weights.append(_weights(learner))
    for untouched, restarted in zip(*weights, strict=True):
        assert torch.equal(untouched, restarted)


def test_a_rank_that_dies_past_max_rank_restarts_stops_the_learner_with_a_learner_error(
        tiny_model: Path) -> None:
    with _start(tiny_model, 2, max_rank_restarts=0) as learner:
        groups = _groups(learner, seed=0)
        _kill_rank_1(learner)
        with pytest.raises(LearnerError, match="learner rank 1 died(.|\n)*max_rank_restarts = 0"):
            learner.train_step(groups)
        with pytest.raises(LearnerError, match="have stopped"):
            learner.train_step(groups)


def test_a_rank_that_raises_fails_rank_0_at_once_and_its_traceback_is_the_error(
        tiny_model: Path) -> None:
    """A token id past the vocabulary in a group only rank 1 forwards: rank 1 raises in its
    forward while rank 0 waits in a collective. Rank 1 leaves the group, so rank 0 fails in
    seconds, not after the collective timeout; the retry fails alike, and the error the
    learner stops with is rank 1's own."""
    with _start(tiny_model, 2, max_rank_restarts=1) as learner:
        groups = _groups(learner, seed=0)
        rank1_groups = split_groups(groups, 2)[1]
        assert rank1_groups
        groups[rank1_groups[-1]].trajectories[0].token_ids[-1] = 10**6
        start = time.perf_counter()
        with pytest.raises(LearnerError, match="learner rank 1: Traceback(.|\\n)*IndexError"):
            learner.train_step(groups)
        assert learner.restarts == 2
        assert time.perf_counter() - start < 120
