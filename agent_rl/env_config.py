"""Which environment a run or an SFT pass uses, and which of its tasks: the `env:` section."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from agent_rl.config import StrictModel


class EnvConfig(StrictModel):
    """The environment a run trains in, and which of its tasks it uses."""

    id: str = Field("agent_rl/PythonTool-v0", description="gymnasium id of the environment")
    kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="gymnasium.make arguments, e.g. {categories: [arithmetic], max_turns: 4}; "
        "the run sets `split` itself",
    )
    split: str = Field("train", description="task split the run trains on")
    max_tasks: int | None = Field(None, ge=1, description="use only the first N tasks (None: all)")
    eval_split: str = Field("heldout", description="task split of periodic evaluation")
    eval_tasks: int = Field(8, ge=1, description="tasks per periodic evaluation, one episode each")
    sandbox_timeout_s: float | None = Field(
        None, gt=0, description="wall-clock limit of one sandboxed tool call; None: the env's"
    )
    step_latency: str | None = Field(
        None, description="make every env step wait this long: fixed:2.5, lognormal:2.5,1.0 "
        "or trace:FILE.json (envs.latency); None: the env's own speed",
    )

    format_penalty: float = Field(
        0.0, ge=0, description="training reward charged for each turn that runs no tool and "
        "gives no answer (a malformed or cut-off call); evaluation never charges it "
        "(envs.format_penalty)",
    )

    agent: str | None = Field(
        None, description="'module:function': your own async agent plays this env's tasks "
        "through the rollout's OpenAI-compatible endpoint in place of the env's step loop "
        "(docs/own-agent.md)",
    )
    agent_time_limit_s: float = Field(
        600.0, gt=0, description="most seconds one agent episode may run; past it the episode "
        "ends as an env error",
    )
    agent_history: Literal["refuse", "new_segment"] = Field(
        "refuse", description="when your agent sends a history that differs from the one its "
        "episode holds (an edited, dropped or summarized message): refuse the request (400), or "
        "start a new segment of the episode, trained as its own sequence (docs/own-agent.md)",
    )

    @field_validator("step_latency")
    @classmethod
    def _readable_latency(cls, spec: str | None) -> str | None:
        if spec is not None:
            from envs.latency import parse_latency

            parse_latency(spec)
        return spec

    def make_kwargs(self, split: str) -> dict[str, Any]:
        """The `gymnasium.make` arguments of one episode on `split`."""
        kwargs: dict[str, Any] = {"split": split, **self.kwargs}
        if self.step_latency is not None:
            kwargs["step_latency"] = self.step_latency
        if self.format_penalty and split == self.split:
            kwargs["format_penalty"] = self.format_penalty
        if self.sandbox_timeout_s is not None:
            from sandbox import SandboxConfig

            kwargs["sandbox_config"] = SandboxConfig(timeout_s=self.sandbox_timeout_s)
        return kwargs
