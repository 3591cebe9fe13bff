"""The learner: recomputes the sampled tokens' logprobs with the newest weights and takes one
AdamW step of group REINFORCE with unclipped importance sampling.

One update reads top to bottom in `Learner.train_step`: advantages per group, samples packed into
token-budget micro-batches, a forward and backward per micro-batch (gradients accumulate), the
pre-clip gradient norm, the optimizer step, the version bump. The model is the matched-kernel
Llama (`kernels.llama.MatchedLlama`) so that at lag 0 the learner's logprobs equal the rollout's
bit for bit, or plain transformers when matched kernels are off (`agent_rl.learn.policy`).
With `learner.world_size` > 1 this is one rank of several (`agent_rl.learn.data_parallel` starts
them): it forwards its share of the groups and the gradients are summed before the step
(`agent_rl.learn.distributed`).
The update returns an `UpdateResult`: what the scheduler needs (lag, flat groups) typed, beside
the metrics it logs (`agent_rl.learn.update_metrics`).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agent_rl.learn.advantages import group_advantages, has_reward_variance
from agent_rl.learn.config import LearnerConfig, LossConfig
from agent_rl.learn.distributed import (
    all_reduce_gradients,
    gather_to_all,
    layout,
    rank_and_world_size,
    split_groups,
)
from agent_rl.learn.errors import LearnerError
from agent_rl.learn.loss import k3_kl, response_loss
from agent_rl.learn.policy import MatchedPolicy, PolicyModel, TransformersPolicy
from agent_rl.learn.samples import Sample, lag0_tokens, micro_batches
from agent_rl.learn.update_metrics import group_metrics, lag_metrics, weight_metrics
from agent_rl.trajectory import Group

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class UpdateResult:
    """One optimizer update: what the pipeline acts on, typed, and the metrics it logs."""

    version: int  # the policy version these weights now have
    lag_max: int  # the oldest sampled token of the update, in updates
    flat_groups: int  # groups without reward variance: no gradient, counted for dynamic sampling
    tokens: int  # tokens forwarded
    metrics: dict[str, Any]


@dataclass
class ForwardTally:
    """What one rank's forwards of an update measured, merged over the ranks for the metrics."""

    weights: list[torch.Tensor]  # IS weights of each sample's sampled tokens
    kl: list[torch.Tensor]  # k3 KL of the same tokens
    lag0: list[torch.Tensor]  # which of them are lag 0
    loss: float  # this rank's part of the update's loss
    tokens: int  # tokens forwarded

    @classmethod
    def merged(cls, tallies: list[ForwardTally]) -> ForwardTally:
        return cls(
            weights=[w for tally in tallies for w in tally.weights],
            kl=[k for tally in tallies for k in tally.kl],
            lag0=[lag0 for tally in tallies for lag0 in tally.lag0],
            loss=sum(tally.loss for tally in tallies),
            tokens=sum(tally.tokens for tally in tallies),
        )


class Learner:
    """Owns the model and the optimizer; `version` counts the optimizer updates taken.

    Inside a process group of `learner.world_size` ranks it is one of them: every rank holds
    the whole model and takes the same step on the summed gradient, so any rank's state is the
    full state.
    """

    def __init__(
        self,
        model_dir: Path,
        config: LearnerConfig | None = None,
        loss: LossConfig | None = None,
        *,
        matched_kernels: bool = True,
        dtype: str = "float32",
        temperature: float = 1.0,
        seed: int = 0,
    ) -> None:
        self.config = config = config or LearnerConfig()
        self.loss = loss or LossConfig()
        self.rank, self.world_size = rank_and_world_size()
        if self.world_size != config.world_size:
            raise LearnerError(
                f"learner.world_size is {config.world_size}, but this process is one of "
                f"{self.world_size} ranks; start the ranks with "
                "agent_rl.learn.data_parallel.DataParallelLearner (agent-rl train does), or set "
                "learner.world_size: 1"
            )
        self.device = learner_device(layout(config.world_size, config.device).devices[self.rank])
        torch.manual_seed(seed)
        policy_class = MatchedPolicy if matched_kernels else TransformersPolicy
        self.policy: PolicyModel = policy_class(
            model_dir, dtype, temperature, config.activation_checkpointing
        )
        self.policy.module.to(self.device)
        self.policy.module.train()
        self.parameters = [p for p in self.policy.module.parameters() if p.requires_grad]
        self.master_weights = master_weights(self.parameters)
        self.optimizer = torch.optim.AdamW(
            self.master_weights,
            lr=config.lr,
            betas=config.betas,
            weight_decay=config.weight_decay,
            eps=config.adam_eps,
        )
        self.version = 0

    def token_logprobs(self, token_ids: list[int] | torch.Tensor) -> torch.Tensor:
        """(T-1,) logprobs of tokens 1..T-1 under the current weights, without a graph."""
        ids = torch.as_tensor(token_ids, dtype=torch.long).to(self.device)
        with torch.no_grad():
            return self.policy.token_logprobs(ids).cpu()

    def train_step(self, groups: list[Group]) -> UpdateResult:
        """One optimizer update on `groups`."""
        start = time.perf_counter()
        metrics = self.accumulate_gradients(groups)
        metrics["losses/lr"] = self.learning_rate()
        metrics["losses/grad_norm"] = self.apply_gradients()
        elapsed = time.perf_counter() - start
        tokens = metrics.pop("forward_tokens")
        metrics["perf/learner_step_s"] = elapsed
        metrics["perf/learner_tokens_per_s"] = tokens / elapsed
        metrics["policy_version"] = self.version
        return UpdateResult(version=self.version, lag_max=int(metrics.get("lag/max", 0)),
                            flat_groups=int(metrics["charts/zero_variance_groups"]),
                            tokens=tokens, metrics=metrics)

    def accumulate_gradients(self, groups: list[Group]) -> dict[str, Any]:
        """Fill `.grad` of every parameter with the gradient of the loss on `groups` (on one
        rank of several: of its share of the groups; `apply_gradients` sums them).

        Separate from the step so that tests can compare the gradient itself.
        """
        if not groups:
            raise LearnerError("an update needs at least one group")
        trained_at = self.version
        loss_config = self.loss

        # Every rank reads the whole batch (the loss is normalised by all its responses and the
        # lag metrics cover all its tokens) but forwards only its own groups.
        mine = set(split_groups(groups, self.world_size)[self.rank])
        b_samples: list[Sample] = []
        b_lags: list[torch.Tensor] = []
        num_responses = 0
        zero_variance = 0
        trained_responses = 0
        for group_index, group in enumerate(groups):
            rewards = group.rewards  # one per episode
            flat = not has_reward_variance(rewards)
            zero_variance += flat
            num_responses += len(rewards)
            advantages = group_advantages(rewards)
            episodes = group.episode_of_each()
            segments = Counter(episodes)
            for trajectory, episode in zip(group.trajectories, episodes, strict=True):
                sample = Sample.from_trajectory(trajectory, advantages[episode])
                sample.group = group_index
                # the segments of an episode share its advantage and, together, its one vote
                sample.weight = 1.0 / segments[episode]
                b_lags.append(trained_at - sample.policy_versions)
                if not sample.model_positions.numel():
                    continue
                # A flat group has A = 0 for every response, so no gradient (unless a KL term
                # gives it one): it is forwarded without a graph, for the IS and KL metrics only.
                sample.needs_grad = not flat or bool(loss_config.kl_coef)
                trained_responses += sample.needs_grad
                if group_index in mine and (sample.needs_grad or self.config.diagnose_flat_groups):
                    b_samples.append(sample)

        lags = torch.cat(b_lags) if b_lags else torch.zeros(0, dtype=torch.long)
        if (lags < 0).any():
            raise LearnerError(
                f"groups carry tokens from policy version {int((trained_at - lags).max())}, newer "
                f"than the learner's {trained_at}; the rollout and learner versions are out of step"
            )

        b_weights: list[torch.Tensor] = []
        b_kl: list[torch.Tensor] = []
        b_lag0: list[torch.Tensor] = []  # tokens sampled, context and all, on these weights
        total_loss = 0.0
        forward_tokens = 0
        self.zero_grad()
        for mb_samples in micro_batches(b_samples, self.config.micro_batch_tokens):
            mb_loss = torch.zeros((), device=self.device)
            for sample, logprobs in self.sampled_logprobs(mb_samples):
                if sample.needs_grad:
                    behavior = sample.behavior_logprobs.to(logprobs.device, logprobs.dtype)
                    loss = response_loss(logprobs, behavior, sample.advantage, loss_config)
                    mb_loss = mb_loss + loss * sample.weight
                with torch.no_grad():
                    learner_logprobs = logprobs.double().cpu()
                    b_weights.append(torch.exp(learner_logprobs - sample.behavior_logprobs))
                    b_kl.append(k3_kl(learner_logprobs, sample.behavior_logprobs))
                    b_lag0.append(lag0_tokens(sample.model_positions, sample.policy_versions,
                                              trained_at, sample.lag0_excluded_turn_starts))
                forward_tokens += sample.num_tokens
            # Every response counts 1/num_responses, flat groups included, so the loss is the
            # mean over all responses of the update however they were split into micro-batches.
            mb_loss = mb_loss / num_responses
            if mb_loss.requires_grad:
                mb_loss.backward()
            total_loss += mb_loss.item()

        tally = ForwardTally.merged(gather_to_all(
            ForwardTally(b_weights, b_kl, b_lag0, total_loss, forward_tokens)))
        return {
            "losses/loss": tally.loss,
            **weight_metrics(tally.weights, tally.kl, tally.lag0),
            **lag_metrics(lags),
            **group_metrics(groups),
            "charts/zero_variance_groups": zero_variance,
            "charts/trained_responses": trained_responses,
            "forward_tokens": tally.tokens,
        }

    def sampled_logprobs(self, samples: list[Sample]) -> Iterator[tuple[Sample, torch.Tensor]]:
        """Each sample with the learner's logprobs of its sampled tokens. Responses of one group
        run as one shared-prompt pass when the model has one; the others run packed into one
        stream per forward. Both give each response the bits it gets alone."""
        loose: list[Sample] = []
        for _, run in itertools.groupby(samples, key=lambda sample: sample.group):
            run = list(run)
            prefix = self._shared_prefix_length(run)
            if not prefix:
                loose += run
                continue
            ids = [sample.token_ids.to(self.device) for sample in run]
            with torch.set_grad_enabled(run[0].needs_grad):
                rows = self.policy.shared_prefix_logprobs(ids[0][:prefix],
                                                          [i[prefix:] for i in ids])
            for sample, logprobs in zip(run, rows, strict=True):
                yield sample, logprobs[sample.model_positions.to(self.device) - prefix]
        for needs_grad in (True, False):
            batch = [sample for sample in loose if sample.needs_grad == needs_grad]
            if not batch:
                continue
            with torch.set_grad_enabled(needs_grad):
                rows = self._packed_logprobs([sample.token_ids.to(self.device) for sample in batch])
            for sample, logprobs in zip(batch, rows, strict=True):
                yield sample, logprobs[sample.model_positions.to(self.device)]

    def _packed_logprobs(self, sequences: list[torch.Tensor]) -> list[torch.Tensor]:
        if hasattr(self.policy, "packed_token_logprobs") and min(s.numel() for s in sequences) > 1:
            return self.policy.packed_token_logprobs(sequences)
        return [self.policy.token_logprobs(ids) for ids in sequences]

    def _shared_prefix_length(self, run: list[Sample]) -> int:
        """How many leading tokens the run can share: common to all its samples and before the
        first sampled token's row; 0 when sharing is off, impossible or not worth it."""
        if (
            len(run) < 2
            or not self.config.share_prompt
            or self.config.activation_checkpointing
            or not hasattr(self.policy, "shared_prefix_logprobs")
        ):
            return 0
        limit = min(int(sample.model_positions.min()) for sample in run
                    if sample.model_positions.numel())
        limit = min([limit] + [sample.num_tokens - 2 for sample in run])
        first = run[0].token_ids
        for sample in run[1:]:
            mismatch = (sample.token_ids[:limit] != first[:limit]).nonzero()
            if mismatch.numel():
                limit = int(mismatch[0])
        return limit

    def apply_gradients(self) -> float:
        """Sum the ranks' gradients (if several), clip (if set), take the optimizer step and
        bump the version; returns the pre-clip gradient norm, the global one."""
        if self.master_weights is not self.parameters:
            for param, master in zip(self.parameters, self.master_weights, strict=True):
                master.grad = None if param.grad is None else param.grad.float()
        if self.world_size > 1:
            all_reduce_gradients(self.master_weights)
        norm = self._clip_gradients()
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate()
        self.optimizer.step()
        if self.master_weights is not self.parameters:
            with torch.no_grad():
                for param, master in zip(self.parameters, self.master_weights, strict=True):
                    param.copy_(master)
        self.zero_grad()
        self.version += 1
        return norm

    def zero_grad(self) -> None:
        """Drop the gradients of the model and of its fp32 master weights."""
        for param in self.parameters:
            param.grad = None
        self.optimizer.zero_grad(set_to_none=True)

    def learning_rate(self) -> float:
        """The rate of the next update. Adam's first steps move every weight by about lr
        whatever the gradient's size, so without a warm-up the first updates shift token
        probabilities most, and the IS weights of tokens sampled just before them swing widest."""
        warmup = self.config.warmup_updates
        return self.config.lr * min(1.0, (self.version + 1) / warmup) if warmup else self.config.lr

    def _clip_gradients(self) -> float:
        """The pre-clip global gradient norm; clips only when max_grad_norm is set."""
        grads = [p.grad for p in self.master_weights if p.grad is not None]
        if not grads:
            return 0.0
        norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
        if self.config.max_grad_norm is not None:
            torch.nn.utils.clip_grads_with_norm_(self.master_weights, self.config.max_grad_norm,
                                                 norm)
        return float(norm)

    def close(self) -> None:
        """Nothing to release (the interface `DataParallelLearner` shares, which stops its
        ranks here)."""

    def rollout_state_dict(self) -> dict[str, torch.Tensor]:
        """The current weights under Hugging Face names, on the CPU, for the rollout."""
        return {name: tensor.cpu() for name, tensor in self.policy.rollout_state_dict().items()}

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.policy.module.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "version": self.version,
            **({} if self.master_weights is self.parameters
               else {"master_weights": [m.detach() for m in self.master_weights]}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        if self.master_weights is not self.parameters:
            with torch.no_grad():
                saved = state.get("master_weights")
                sources = saved if saved is not None else self.parameters
                for master, source in zip(self.master_weights, sources, strict=True):
                    master.copy_(source)


def master_weights(parameters: list[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
    """What the optimizer updates: the parameters themselves in fp32, else fp32 copies of them.

    An AdamW step moves a weight by about the learning rate; at 1e-5 that is below half a bf16
    ulp of most weights, so a bf16 model stepped in place would not change at all. The model
    keeps its dtype (so the rollout gets the very weights the learner's forward uses) and takes
    the rounded master weights after every step.
    """
    if all(p.dtype == torch.float32 for p in parameters):
        return parameters
    return [torch.nn.Parameter(p.detach().float().clone()) for p in parameters]


def learner_device(name: str) -> torch.device:
    """The device `learner.device` names, checked before any model is built."""
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise LearnerError(f"learner.device {name!r} is not a device; use 'cpu' or 'cuda'") from error
    if device.type == "cuda" and not torch.cuda.is_available():
        raise LearnerError(f"learner.device {name!r} asks for a CUDA GPU, but torch sees none "
                           f"(torch {torch.__version__}); use learner.device: cpu")
    if device.type not in ("cpu", "cuda"):
        raise LearnerError(f"learner.device {name!r}: the learner runs on 'cpu' or 'cuda'")
    return device


