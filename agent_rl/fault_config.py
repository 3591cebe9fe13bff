"""The `faults:` section of a run config: which faults a run injects on purpose, and when
(`agent_rl.orchestrate.faults` injects them). Plain data, so that reading a config imports
neither the pipeline nor its environments."""

from __future__ import annotations

from pydantic import Field

from agent_rl.config import StrictModel

KILL_ACTOR = "kill_actor"
KILL_LEARNER = "kill_learner"
DELAY_BROADCAST = "delay_broadcast"
FILL_QUEUE = "fill_queue"
ENV_RAISE = "env_raise"
SANDBOX_HANG = "sandbox_hang"
SANDBOX_KILL = "sandbox_kill"
MALFORMED_OUTPUT = "malformed_output"

DRIVER_FAULTS = (KILL_ACTOR, KILL_LEARNER, DELAY_BROADCAST, FILL_QUEUE)
ENV_FAULTS = (ENV_RAISE, SANDBOX_HANG, SANDBOX_KILL, MALFORMED_OUTPUT)


class FaultConfig(StrictModel):
    """Which faults a run injects, and when. Everything is off by default."""

    kill_actor_at_updates: list[int] = Field(
        default_factory=list, description="after these updates, kill a rollout actor mid-episode"
    )
    kill_learner_at_update: int | None = Field(
        None, ge=1, description="raise LearnerKilled right after this update (and its checkpoint)"
    )
    weight_broadcast_delay_s: float = Field(
        0.0, ge=0, description="hold every weight broadcast this long before sending it"
    )
    delay_broadcast_at_updates: list[int] = Field(
        default_factory=list,
        description="hold the weight broadcast of the update after these for random_delay_s",
    )
    fill_queue_at_updates: list[int] = Field(
        default_factory=list,
        description="before the update after these, hold the learner until the queue is full",
    )
    env_raise_every: int = Field(0, ge=0, description="every Nth env.step raises; 0: never")
    sandbox_hang_every: int = Field(
        0, ge=0, description="every Nth env.step runs code that never returns; 0: never"
    )
    sandbox_kill_every: int = Field(
        0, ge=0, description="every Nth env.step kills its sandbox interpreter; 0: never"
    )
    malformed_output_every: int = Field(
        0, ge=0, description="every Nth env.step gets malformed model output; 0: never"
    )
    random_every_s: float = Field(
        0.0, ge=0, description="inject one random driver fault every N seconds; 0: never"
    )
    random_faults: list[str] = Field(
        default_factory=lambda: [KILL_ACTOR, DELAY_BROADCAST, FILL_QUEUE],
        description=f"the driver faults random injection picks from ({', '.join(DRIVER_FAULTS)})",
    )
    random_delay_s: float = Field(
        5.0, ge=0, description="a broadcast delay injected at an update or at random lasts this long"
    )
    seed: int = Field(0, description="seed of random fault choice")

    @property
    def env_faults_on(self) -> bool:
        return any(getattr(self, f"{kind}_every") for kind in ENV_FAULTS)
