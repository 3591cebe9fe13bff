"""The ledger's audit: every generated group is trained once or dropped with a reason."""

from __future__ import annotations

import pytest

from agent_rl.orchestrate.ledger import Ledger, LedgerError


def _ledger() -> Ledger:
    ledger = Ledger()
    for group_id in ("a", "b", "c", "d"):
        ledger.record_generated(group_id)
    ledger.record_trained("a")
    ledger.record_trained("b", zero_variance=True)
    ledger.record_dropped("c", "stale")
    return ledger


def test_balances_with_pending_groups_and_after_they_are_settled() -> None:
    ledger = _ledger()
    ledger.check(pending={"d"})
    with pytest.raises(LedgerError, match="1 generated groups neither trained"):
        ledger.check()
    ledger.record_dropped("d", "run_ended")
    ledger.check()
    assert ledger.counts() == {
        "generated": 4,
        "trained": 2,
        "dropped": 2,
        "dropped_by_reason": {"stale": 1, "run_ended": 1},
        "rerun": 0,
        "zero_variance": 1,
    }


def test_a_group_is_never_trained_twice() -> None:
    ledger = _ledger()
    with pytest.raises(LedgerError, match="already trained"):
        ledger.record_trained("a")
    with pytest.raises(LedgerError, match="was dropped"):
        ledger.record_trained("c")
    with pytest.raises(LedgerError, match="generated twice"):
        ledger.record_generated("a")
    with pytest.raises(LedgerError, match="never generated"):
        ledger.record_trained("zzz")


def test_pending_group_cannot_also_be_trained() -> None:
    with pytest.raises(LedgerError, match="both"):
        _ledger().check(pending={"a", "d"})


def test_round_trips_through_a_dict() -> None:
    ledger = _ledger()
    ledger.record_rerun("d")
    assert Ledger.from_dict(ledger.to_dict()) == ledger
