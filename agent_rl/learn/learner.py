"""The learner: recomputes the sampled tokens' logprobs with the newest weights and takes one
AdamW step of group REINFORCE with unclipped importance sampling.

One update reads top to bottom in `Learner.train_step`: advantages per group, samples packed into
token-budget micro-batches, a forward and backward per micro-batch (gradients accumulate), the
pre-clip gradient norm, the optimizer step, the version bump. The model is the matched-kernel
Llama (`kernels.llama.MatchedLlama`) so that at lag 0 the learner's logprobs equal the rollout's
bit for bit, or plain transformers (in the run's dtype, its log_softmax in fp32) when matched
kernels are off.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import torch

from agent_rl.learn.advantages import group_advantages, has_reward_variance
from agent_rl.learn.config import LearnerConfig, LossConfig
from agent_rl.learn.loss import k3_kl, response_loss
from agent_rl.trajectory import STALE_CONTEXT_TURNS, Group, Trajectory

logger = logging.getLogger(__name__)


class LearnerError(RuntimeError):
    """Data the learner cannot train on, or a model it cannot build."""


class PolicyModel(Protocol):
    """What the learner needs of a model, whichever kernels compute it."""

    module: torch.nn.Module

    def token_logprobs(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(T,) ids -> (T-1,) logprob of each next token, differentiable."""
        ...

    def rollout_state_dict(self) -> dict[str, torch.Tensor]:
        """Weights under Hugging Face names, as the rollout engine loads them."""
        ...


class TransformersPolicy:
    """Plain transformers, with the vocabulary projection's log_softmax done in fp32."""

    def __init__(self, model_dir: Path, dtype: str, temperature: float, checkpointing: bool):
        from transformers import AutoModelForCausalLM

        self.module = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
        self.module.config.use_cache = False
        if dtype != "float32":
            for layer in self.module.modules():
                if isinstance(layer, torch.nn.Linear):
                    layer.forward = partial(_fp32_accumulated_linear, layer)
        if checkpointing:
            self.module.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        self.temperature = temperature

    def token_logprobs(self, input_ids: torch.Tensor) -> torch.Tensor:
        logits = self.module(input_ids=input_ids[None], use_cache=False).logits[0, :-1].float()
        if self.temperature != 1.0:
            logits = logits / self.temperature
        logprobs = torch.log_softmax(logits, dim=-1)
        return logprobs.gather(-1, input_ids[1:, None]).squeeze(-1)

    def rollout_state_dict(self) -> dict[str, torch.Tensor]:
        state = {name: tensor.detach() for name, tensor in self.module.state_dict().items()}
        if getattr(self.module.config, "tie_word_embeddings", False):
            # vLLM ties lm_head to the embedding itself; sending it twice doubles the broadcast.
            state.pop("lm_head.weight", None)
        return state


def _fp32_accumulated_linear(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """A bf16 linear layer as GPU and AMX GEMMs compute it: fp32 products and sums, the output
    rounded to bf16. On the CPU, torch's own bf16 GEMM runs 10-80x slower than fp32 where the
    CPU has no native bf16 (AVX2: 1.7-17 GFLOP/s against 110-150), backward included."""
    if x.device.type != "cpu" or x.dtype == torch.float32:
        return torch.nn.functional.linear(x, layer.weight, layer.bias)
    bias = None if layer.bias is None else layer.bias.float()
    return torch.nn.functional.linear(x.float(), layer.weight.float(), bias).to(x.dtype)


class MatchedPolicy:
    """The matched-kernel Llama: the same ops, in the same reduction order, as the rollout."""

    def __init__(self, model_dir: Path, dtype: str, temperature: float, checkpointing: bool):
        try:
            from kernels.llama import MatchedLlama
        except ImportError as err:
            raise LearnerError(
                f"matched_kernels=True needs kernels.llama.MatchedLlama, which failed to import "
                f"({err}); set matched_kernels: false to train with plain transformers"
            ) from err
        self.module = MatchedLlama.from_pretrained(model_dir, dtype=getattr(torch, dtype))
        self.module.activation_checkpointing = checkpointing
        self.temperature = temperature

    def token_logprobs(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.module.token_logprobs(input_ids, self.temperature)

    def shared_prefix_logprobs(self, prefix: torch.Tensor, suffixes: list[torch.Tensor]
                               ) -> list[torch.Tensor]:
        return self.module.shared_prefix_logprobs(prefix, suffixes, self.temperature)

    def packed_token_logprobs(self, sequences: list[torch.Tensor]) -> list[torch.Tensor]:
        return self.module.packed_token_logprobs(sequences, self.temperature)

    def rollout_state_dict(self) -> dict[str, torch.Tensor]:
        from kernels.llama import hf_name

        return {hf_name(name): tensor.detach() for name, tensor in self.module.state_dict().items()}


@dataclass
class Sample:
    """One response cut for training: position t of the arrays predicts token t+1."""

    token_ids: torch.Tensor  # (T,) the whole episode: prompt, model turns, tool results
    model_positions: torch.Tensor  # (N,) positions in the (T-1,) logprob row that were sampled
    behavior_logprobs: torch.Tensor  # (N,) what the rollout recorded for those tokens
    policy_versions: torch.Tensor  # (N,) the policy version that sampled each token
    advantage: float
    needs_grad: bool = True  # False: forwarded for the IS/KL metrics only (a flat group)
    stale_turn_starts: tuple[int, ...] = ()  # model positions where a stale-context turn begins
    group: int = -1  # index of its group in the update: responses to one prompt share a prefix

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
            stale_turn_starts=tuple(
                index - 1 for index in trajectory.info.get(STALE_CONTEXT_TURNS, ())
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


class Learner:
    """Owns the model and the optimizer; `version` counts the optimizer updates taken."""

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
        self.device = learner_device(config.device)
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

    def train_step(self, groups: list[Group]) -> dict[str, Any]:
        """One optimizer update on `groups`; returns the update's metrics."""
        start = time.perf_counter()
        metrics = self.accumulate_gradients(groups)
        metrics["losses/lr"] = self.learning_rate()
        metrics["losses/grad_norm"] = self.apply_gradients()
        elapsed = time.perf_counter() - start
        metrics["perf/learner_step_s"] = elapsed
        metrics["perf/learner_tokens_per_s"] = metrics.pop("forward_tokens") / elapsed
        metrics["policy_version"] = self.version
        return metrics

    def accumulate_gradients(self, groups: list[Group]) -> dict[str, Any]:
        """Fill `.grad` of every parameter with the gradient of the loss on `groups`.

        Separate from the step so that tests can compare the gradient itself.
        """
        if not groups:
            raise LearnerError("an update needs at least one group")
        trained_at = self.version
        loss_config = self.loss

        b_samples: list[Sample] = []
        b_lags: list[torch.Tensor] = []
        num_responses = 0
        zero_variance = 0
        for group_index, group in enumerate(groups):
            rewards = group.rewards
            flat = not has_reward_variance(rewards)
            zero_variance += flat
            num_responses += len(group.trajectories)
            for trajectory, advantage in zip(
                group.trajectories, group_advantages(rewards), strict=True
            ):
                sample = Sample.from_trajectory(trajectory, advantage)
                sample.group = group_index
                b_lags.append(trained_at - sample.policy_versions)
                if not sample.model_positions.numel():
                    continue
                # A flat group has A = 0 for every response, so no gradient (unless a KL term
                # gives it one): it is forwarded without a graph, for the IS and KL metrics only.
                sample.needs_grad = not flat or bool(loss_config.kl_coef)
                if sample.needs_grad or self.config.diagnose_flat_groups:
                    b_samples.append(sample)

        lags = torch.cat(b_lags) if b_lags else torch.zeros(0, dtype=torch.long)
        if (lags < 0).any():
            raise LearnerError(
                f"groups carry tokens from policy version {int((trained_at - lags).max())}, newer "
                f"than the learner's {trained_at}; the rollout and learner versions are out of step"
            )

        b_weights: list[torch.Tensor] = []
        b_kl: list[torch.Tensor] = []
        b_fresh: list[torch.Tensor] = []  # lag-0 tokens whose turn began on these weights too
        total_loss = 0.0
        forward_tokens = 0
        self.zero_grad()
        for mb_samples in micro_batches(b_samples, self.config.micro_batch_tokens):
            mb_loss = torch.zeros((), device=self.device)
            for sample, logprobs in self.sampled_logprobs(mb_samples):
                if sample.needs_grad:
                    behavior = sample.behavior_logprobs.to(logprobs.device, logprobs.dtype)
                    loss = response_loss(logprobs, behavior, sample.advantage, loss_config)
                    mb_loss = mb_loss + loss
                with torch.no_grad():
                    learner_logprobs = logprobs.double().cpu()
                    b_weights.append(torch.exp(learner_logprobs - sample.behavior_logprobs))
                    b_kl.append(k3_kl(learner_logprobs, sample.behavior_logprobs))
                    b_fresh.append(same_weights_tokens(sample.model_positions,
                                                       sample.policy_versions, trained_at,
                                                       sample.stale_turn_starts))
                forward_tokens += sample.num_tokens
            # Every response counts 1/num_responses, flat groups included, so the loss is the
            # mean over all responses of the update however they were split into micro-batches.
            mb_loss = mb_loss / num_responses
            if mb_loss.requires_grad:
                mb_loss.backward()
            total_loss += mb_loss.item()

        return {
            "losses/loss": total_loss,
            **_weight_metrics(b_weights, b_kl, b_fresh),
            **_lag_metrics(lags),
            **group_metrics(groups),
            "charts/zero_variance_groups": zero_variance,
            "charts/trained_responses": sum(sample.needs_grad for sample in b_samples),
            "forward_tokens": forward_tokens,
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
        """Clip (if set), take the optimizer step and bump the version; returns the pre-clip
        gradient norm."""
        if self.master_weights is not self.parameters:
            for param, master in zip(self.parameters, self.master_weights, strict=True):
                master.grad = None if param.grad is None else param.grad.float()
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


def same_weights_tokens(positions: torch.Tensor, versions: torch.Tensor,
                        version: int, stale_turn_starts: Sequence[int] = ()) -> torch.Tensor:
    """The model tokens sampled with weights `version` in a turn that began with them.

    A weight update lands while turns are in flight: the turn goes on with the new weights, and
    its later tokens carry the new version, but its context's KV was computed by the older
    ones, so the learner's fresh forward differs from them by the weight change, not by the
    kernels. A turn is a run of consecutive model positions; requests are salted by version,
    so a turn that began on `version` computed its whole context with it, unless its prefill
    began before the update landed: the rollout names those turns (`stale_turn_starts`).
    """
    starts = torch.ones_like(positions, dtype=torch.bool)
    starts[1:] = positions[1:] != positions[:-1] + 1
    turn_index = starts.long().cumsum(0) - 1
    turn_ok = versions[starts] == version
    if stale_turn_starts:
        turn_ok &= ~torch.isin(positions[starts], torch.tensor(stale_turn_starts))
    return (versions == version) & turn_ok[turn_index]


def _weight_metrics(weights: list[torch.Tensor], kl: list[torch.Tensor],
                    fresh: list[torch.Tensor]) -> dict[str, float]:
    """IS weight statistics; `is/lag0_*` over the tokens whose whole turn was sampled with the
    very weights the learner holds (`same_weights_tokens`), where any deviation from 1 is
    kernel mismatch alone (0 with matched kernels), apart from the weight lag the other tokens
    carry."""
    if not weights:
        return {}
    w = torch.cat(weights)
    median = float(w.median())
    at_lag0 = w[torch.cat(fresh)]
    lag0 = {"is/lag0_tokens": int(at_lag0.numel())}
    if at_lag0.numel():
        lag0["is/lag0_max_abs_log"] = float(at_lag0.log().abs().max())
    return {
        **lag0,
        "is/max": float(w.max()),
        "is/min": float(w.min()),
        "is/median": median,
        "is/mean": float(w.mean()),
        "is/max_over_median": float(w.max()) / median if median > 0 else math.inf,
        "is/kl_k3": float(torch.cat(kl).mean()),
        "is/tokens": int(w.numel()),
    }


LAG_SHARE_THRESHOLDS = (16, 32, 48)  # `lag/share_ge_N`: how much of an update is far behind


def _lag_metrics(lags: torch.Tensor) -> dict[str, Any]:
    """Lag of every sampled token of the update: mean, max, histogram, and the share at lag
    >= 16, 32 and 48 (the method's lag-64 setting lives there)."""
    if not lags.numel():
        return {}
    histogram = Counter(lags.tolist())
    return {
        "lag/mean": float(lags.double().mean()),
        "lag/max": int(lags.max()),
        "lag/hist": {str(lag): count for lag, count in sorted(histogram.items())},
        **{f"lag/share_ge_{threshold}": float((lags >= threshold).double().mean())
           for threshold in LAG_SHARE_THRESHOLDS},
    }


def group_metrics(groups: list[Group]) -> dict[str, float]:
    """Reward and length charts over every response of `groups`."""
    trajectories = [t for group in groups for t in group.trajectories]
    rewards = torch.tensor([t.reward for t in trajectories], dtype=torch.float64)
    end_reasons = Counter(t.end_reason for t in trajectories)
    return {
        "charts/reward_mean": float(rewards.mean()),
        "charts/reward_std": float(rewards.std()) if len(rewards) > 1 else 0.0,
        "charts/groups": len(groups),
        "charts/responses": len(trajectories),
        "charts/model_tokens_mean": sum(t.num_model_tokens for t in trajectories)
        / len(trajectories),
        "charts/episode_tokens_mean": sum(len(t.token_ids) for t in trajectories)
        / len(trajectories),
        "charts/turns_mean": sum(t.num_turns for t in trajectories) / len(trajectories),
        # tool use: calls of tools other than `answer` per episode, and the share that made one
        "charts/tool_calls_mean": sum(t.info.get("tool_calls_total", 0) for t in trajectories)
        / len(trajectories),
        "charts/tool_use_share": sum(t.info.get("tool_calls_total", 0) > 0 for t in trajectories)
        / len(trajectories),
        # what a format penalty (envs.format_penalty) took off the reward: reward_mean plus this
        # is the task's own reward
        "charts/format_penalty_mean": sum(t.info.get("format_penalty_total", 0.0)
                                          for t in trajectories) / len(trajectories),
        # what an env latency profile (envs.latency) made each episode wait, in all
        "perf/env_latency_s_mean": sum(t.info.get("env_latency_total_s", 0.0)
                                       for t in trajectories) / len(trajectories),
        **{f"charts/end_{reason}": count for reason, count in end_reasons.items()},
    }
