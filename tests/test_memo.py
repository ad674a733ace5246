"""Kept by one process (infra/memo.py): memos that answer for a while, chores paced by a clock."""
import datetime as dt

from infra.memo import Pacer, ProcessMemo, forget_all

T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def test_a_memo_loads_once_within_its_time_and_hands_out_copies():
    loads = []
    memo = ProcessMemo(seconds=60)
    first = memo.get("key", lambda: loads.append(1) or ["value"])
    first.append("changed by a caller")
    assert memo.get("key", lambda: loads.append(1) or ["other"]) == ["value"]
    assert len(loads) == 1
    memo.forget("key")
    assert memo.get("key", lambda: ["loaded again"]) == ["loaded again"]


def test_a_paced_chore_is_due_once_per_period_of_the_callers_clock():
    pacer = Pacer()
    assert pacer.due(T0, 5)
    assert not pacer.due(T0 + dt.timedelta(seconds=4.9), 5)
    assert pacer.due(T0 + dt.timedelta(seconds=5), 5)
    assert not pacer.due(T0 + dt.timedelta(seconds=6), 5)


def test_a_clock_that_went_back_or_a_forget_makes_it_due():
    pacer = Pacer()
    assert pacer.due(T0, 5)
    assert pacer.due(T0 - dt.timedelta(hours=1), 5)  # a test's clock, or a caller passing an earlier time
    assert not pacer.due(T0 - dt.timedelta(hours=1), 5)
    forget_all()
    assert pacer.due(T0 - dt.timedelta(hours=1), 5)
