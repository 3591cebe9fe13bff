"""Hook points of a run: where code that is not scheduling (fault injection, for one) joins in.

A hook overrides the methods it needs; `Hooks` calls every registered hook in order. The
scheduler asks `holds_batch`, the actor pool asks `broadcast_delay_s` and reports
`delayed_broadcast_settled` and `actor_restored`, and the pipeline calls the rest.
"""

from __future__ import annotations

from typing import Any


class Hook:
    """No-op defaults for every hook point."""

    def after_update(self, version: int) -> None:
        """Update `version` is done (trained, broadcast, checkpointed); may raise to stop."""

    def tick(self, scheduler: Any, pool: Any) -> None:
        """Once per turn of the run's loop, after new work is submitted."""

    def holds_batch(self, scheduler: Any) -> bool:
        """True holds the next update back even though a batch is ready."""
        return False

    def broadcast_delay_s(self) -> float:
        """How long to hold the broadcast about to go out."""
        return 0.0

    def delayed_broadcast_settled(self) -> None:
        """A held-back broadcast went out late, or a newer one replaced it."""

    def actor_restored(self, actor: int) -> None:
        """A restarted actor holds the current weights again."""

    def episode_finished(self, info: dict[str, Any]) -> None:
        """A trajectory reached the driver (its env info)."""


class Hooks(Hook):
    """The registered hooks, called in order; a query takes the strongest answer."""

    def __init__(self, hooks: list[Hook] | None = None) -> None:
        self.hooks = list(hooks or [])

    def after_update(self, version: int) -> None:
        for hook in self.hooks:
            hook.after_update(version)

    def tick(self, scheduler: Any, pool: Any) -> None:
        for hook in self.hooks:
            hook.tick(scheduler, pool)

    def holds_batch(self, scheduler: Any) -> bool:
        return any([hook.holds_batch(scheduler) for hook in self.hooks])

    def broadcast_delay_s(self) -> float:
        return max([hook.broadcast_delay_s() for hook in self.hooks], default=0.0)

    def delayed_broadcast_settled(self) -> None:
        for hook in self.hooks:
            hook.delayed_broadcast_settled()

    def actor_restored(self, actor: int) -> None:
        for hook in self.hooks:
            hook.actor_restored(actor)

    def episode_finished(self, info: dict[str, Any]) -> None:
        for hook in self.hooks:
            hook.episode_finished(info)
