"""The learner's and the loss's sections of a run config: plain data, so that reading a config
does not import torch."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agent_rl.config import StrictModel

ISLevel = Literal["token", "sequence"]


class LossConfig(StrictModel):
    """Switches of the objective; the defaults are the method (no clip, token IS, no KL)."""

    clip: float | None = Field(None, gt=0, description="truncate IS weights here (TIS); None: unclipped")
    is_level: ISLevel = Field(
        "token", description="IS weight per token, or 'sequence': one ratio per response"
    )
    kl_coef: float = Field(0.0, ge=0, description="weight of a k3 KL penalty towards the behavior policy")



class LearnerConfig(StrictModel):
    """The learner's knobs: the optimizer, its batches and where it runs. The model, dtype,
    temperature and seed are the run's and are given to `Learner` beside this."""

    lr: float = Field(1e-6, gt=0, description="AdamW learning rate")
    warmup_updates: int = Field(
        0, ge=0, description="ramp the learning rate linearly up to lr over this many updates"
    )
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas")
    weight_decay: float = Field(0.0, ge=0, description="AdamW decoupled weight decay")
    adam_eps: float = Field(1e-8, gt=0, description="AdamW epsilon")
    max_grad_norm: float | None = Field(
        None, gt=0, description="clip gradients here; None: never (the norm is always measured)"
    )
    micro_batch_tokens: int = Field(8192, ge=1, description="token budget of one backward pass")
    activation_checkpointing: bool = Field(
        False, description="recompute activations to fit long sequences"
    )
    diagnose_flat_groups: bool = Field(
        True, description="forward zero-variance groups (no gradient) so IS/KL cover all tokens"
    )
    share_prompt: bool = Field(
        True, description="forward a group's common prompt once (matched kernels: the same bits; "
        "stock: the same to rounding)"
    )
    device: str = Field(
        "cpu", pattern=r"^(cpu|cuda(:[0-9]+)?)$",
        description="where the model, optimizer and recomputed logprobs live: cpu or cuda",
    )
    threads: int | None = Field(None, ge=1, description="torch threads of the learner; None: default")
    world_size: int = Field(
        1, ge=1, description="data-parallel learner ranks, each with the whole model: rank 0 in "
        "the driver, the others Ray actors; an update's groups are split across them"
    )
    max_rank_restarts: int = Field(
        3, ge=0, description="times the learner restarts its other ranks after one dies or "
        "fails, from rank 0's state, before the run stops"
    )
