"""Active time on a task: measured by the page (idle stretches not counted) and reported as
running totals, on the whole task and per step, with each action or in a heartbeat.

The stored value only grows, so a late or repeated report is harmless; it never exceeds the
wall-clock time since the task was served. Heartbeats are rate-limited per user, site-wide.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from annotate.labeling import rows
from annotate.labeling.refusals import LabelingError
from annotate.models import Annotation, LabelingConfig, StepLabel
from infra import throttling

# Reports may run a little ahead of the server clock (latency, clock skew).
_TIME_SLACK_MS = 120_000
# step_ms pairs one report may carry, refused before any parsing beyond a split: the page
# reports only the steps active since its last report, and a solution has far fewer steps.
MAX_STEP_TIMES = 500


@dataclass
class ActiveTime:
    """Active milliseconds so far: on the whole task and per step index."""

    total_ms: int = 0
    steps: dict[int, int] = field(default_factory=dict)


def parse_times(data) -> ActiveTime | None:
    """Read `total_ms` and `step_ms` ("index:ms,index:ms") from a POST; None when absent.

    At most MAX_STEP_TIMES pairs; that each index is a step of the solution is checked
    when the times are stored.
    """
    if not data.get("total_ms"):
        return None
    step_ms = data.get("step_ms") or ""
    # Each pair is at least "i:m," (4 characters), so a longer text has too many pairs.
    if len(step_ms) > MAX_STEP_TIMES * 24 or step_ms.count(",") >= MAX_STEP_TIMES:
        raise LabelingError(f"step_ms: at most {MAX_STEP_TIMES} index:ms pairs")
    try:
        times = ActiveTime(total_ms=int(data["total_ms"]))
        for part in filter(None, step_ms.split(",")):
            index, ms = part.split(":")
            times.steps[int(index)] = int(ms)
    except ValueError:
        raise LabelingError("total_ms and step_ms must be whole milliseconds (step_ms as index:ms,...)") from None
    if times.total_ms < 0 or any(i < 0 or ms < 0 for i, ms in times.steps.items()):
        raise LabelingError("total_ms and step_ms cannot be negative")
    return times


def heartbeat_allowed(*, user_id: int) -> bool:
    """Whether the user is within STEPWISE_HEARTBEATS_PER_MINUTE, site-wide (infra/throttling.py);
    yes while the count cannot be kept (Redis away): labeling goes on."""
    rate = (settings.STEPWISE_HEARTBEATS_PER_MINUTE, 60)
    return throttling.check("heartbeat", user_id, rate, fail_open=True).allowed


def record_time(*, annotation: rows.AnnotationOrRef, times: ActiveTime) -> None:
    """Store a report of active time (heartbeats) and keep the lease."""
    rows.act(annotation, LabelingConfig.of(annotation.project_id), lambda change: store_times(change, times))


def store_times(change: rows.Change, times: ActiveTime | None) -> ActiveTime | None:
    """Store a time report among an action's writes; returns the times now stored for the task and
    for the steps the report named (None without a report). Only a grown total and the steps
    whose time grew are written."""
    if times is None:
        return None
    annotation = change.annotation
    # Never more than the wall-clock time since the task was served.
    ceiling = int((timezone.now() - annotation.created_at) / dt.timedelta(milliseconds=1)) + _TIME_SLACK_MS
    total = min(times.total_ms, ceiling)
    if total > (annotation.total_time_ms or 0):
        change.writes.update(Annotation, annotation.pk, total_time_ms=total)
    offered = {index: min(ms, ceiling) for index, ms in times.steps.items()}
    stored = change.stored_times()
    if not offered.keys() <= stored.keys():
        # Raised before the action's writes are made, so nothing of this report is kept.
        raise LabelingError("step_ms: every index must be a step of this solution")
    _write_step_times({stored[index][0]: ms for index, ms in offered.items() if ms > stored[index][1]}, change)
    return ActiveTime(max(total, annotation.total_time_ms or 0),
                      {index: max(ms, stored[index][1]) for index, ms in offered.items()})


def _write_step_times(grown: dict[int, int], change: rows.Change) -> None:
    """StepLabel id -> its new time, among the action's writes: made with its other writes, in
    one statement on PostgreSQL, however many steps a report names (a heartbeat after a pause
    may name many)."""
    for pk, ms in grown.items():
        change.writes.update(StepLabel, pk, time_ms=ms)
