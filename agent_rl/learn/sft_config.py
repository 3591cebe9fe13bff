"""An SFT run's config (`agent-rl sft CONFIG`): plain data, so that reading it does not import
torch."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from agent_rl.config import StrictModel, load_config
from agent_rl.env_config import EnvConfig
from agent_rl.learn.config import LearnerConfig


def _sft_learner() -> LearnerConfig:
    return LearnerConfig(lr=1e-5, max_grad_norm=1.0)


class SFTConfig(StrictModel):
    """One SFT run: the model, where demonstrations come from, the learner, the outputs."""

    model: str = Field("tiny", description="'default', 'tiny', or a checkpoint directory")
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="the model's dtype")
    seed: int = Field(0, description="seed of the demonstration order and the model")
    out_dir: Path = Field(Path("runs/sft"), description="where the run's files go")
    resume: bool = Field(True, description="continue from the newest checkpoint in out_dir")
    env: EnvConfig = Field(
        default_factory=EnvConfig,
        description="the env whose oracle plays the demos (its train split only); "
        "env.kwargs.categories picks the categories",
    )
    demos_per_category: int | None = Field(
        None, ge=1, description="oracle demonstrations per category, from the train split"
    )
    oracle: bool = Field(True, description="include the env oracle's demonstrations")
    demonstration_files: list[Path] = Field(
        default_factory=list, description="JSONL files of chat conversations to train on too"
    )
    epochs: float = Field(1.0, gt=0, description="passes over the demonstrations")
    batch_size: int = Field(8, ge=1, description="demonstrations per optimizer step")
    learner: LearnerConfig = Field(
        default_factory=_sft_learner,
        description="the RL learner's config; here lr defaults to 1e-5 and max_grad_norm to 1.0",
    )

    @model_validator(mode="after")
    def _train_split_only(self) -> SFTConfig:
        if self.env.split != "train":
            raise ValueError(f"env.split is {self.env.split!r}: demonstrations come from the "
                             "train split only, so held-out tasks stay unseen")
        return self


def load_sft_config(path: str | Path, overrides: dict[str, Any] | None = None) -> SFTConfig:
    return load_config(path, SFTConfig, overrides)
