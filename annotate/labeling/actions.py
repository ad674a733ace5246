"""Labeling one solution: rate, flag, undo, correct, write a step, submit.

Every action is saved at once and says what the state should be (rate step 3 as +1,
flag step 2 on), never "toggle": a repeated POST changes nothing. Once submitted, an
annotation is frozen and every change raises AlreadySubmitted (HTTP 409).
Time is active time measured by the page (idle stretches not counted) and reported as
running totals; the stored value only grows, so a late or repeated report is harmless.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, transaction
from django.db.models import Case, IntegerField, Value, When
from django.utils import timezone

from annotate.labeling import queueing, verdicts
from annotate.models import Annotation, Completion, FinishReason, LabelingConfig, Problem, StepLabel
from infra import statements, throttling

RATINGS = (-1, 0, 1)
MAX_COMPLETION_CHARS = 5000
# A reason given on submit (give up, bad problem) or with a reviewer's override; the page
# says the same, but only the server's check binds (9 MB notes were stored before it).
MAX_NOTE_CHARS = 2000
# Reports may run a little ahead of the server clock (latency, clock skew).
_TIME_SLACK_MS = 120_000
# step_ms pairs one report may carry, refused before any parsing beyond a split: the page
# reports only the steps active since its last report, and a solution has far fewer steps.
MAX_STEP_TIMES = 500


class AlreadySubmitted(Exception):
    """A change to a submitted annotation."""


class LabelingError(ValueError):
    """An action that the task's state or the input does not allow; the message says why."""


@dataclass
class ActiveTime:
    """Active milliseconds so far: on the whole task and per step index."""

    total_ms: int = 0
    steps: dict[int, int] = field(default_factory=dict)


@dataclass
class StepRow:
    index: int
    text: str
    rating: int | None
    flagged: bool
    time_ms: int
    human_completion: str | None
    state: str  # rated | current | locked | after_error
    submitted: bool = False  # the task's

    @property
    def inactive(self) -> bool:
        """Greyed out: waiting for earlier steps, or past the first error."""
        return self.state in ("locked", "after_error")

    @property
    def disabled(self) -> bool:
        """Its buttons are off: inactive, or the task is submitted."""
        return self.inactive or self.submitted


@dataclass
class Task:
    """What the labeling page shows of one annotation."""

    annotation: Annotation
    steps: list[StepRow]
    next_index: int | None
    first_error: int | None
    finish_reason: str | None
    config: LabelingConfig
    # After a rating: the steps whose row on the page it changed (None: not known, show all).
    changed: set[int] | None = None

    @property
    def submitted(self) -> bool:
        return self.annotation.is_submitted

    @property
    def rated_count(self) -> int:
        return sum(row.rating is not None for row in self.steps if row.state != "after_error")

    @property
    def countable(self) -> int:
        return sum(row.state != "after_error" for row in self.steps)


def annotation_for(*, user, pk: int) -> Annotation:
    """The user's own annotation `pk`; anyone else's does not exist for them."""
    return Annotation.objects.get(pk=pk, annotator=user)


_PROBLEM = statements.Compiled(lambda solution_id: (
    Problem.objects.filter(solutions__pk=solution_id).values_list("pk", "statement", "ground_truth_answer")
))


def problem_of(annotation: Annotation) -> Problem:
    """What the task's page shows of its problem: the statement and the answer."""
    (values,) = _PROBLEM.rows(solution_id=annotation.solution_id)
    return Problem.from_db(DEFAULT_DB_ALIAS, ["id", "statement", "ground_truth_answer"], values)


def handle_for(*, user, pk: int) -> Annotation:
    """The user's annotation `pk` as a handle for an action, not read yet: each action reads it
    under its lock, which checks the owner too (Annotation.DoesNotExist if not theirs), so the
    hot path makes one read of the row, not two."""
    return Annotation(pk=pk, annotator_id=user.pk)


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


def task_view(annotation: Annotation, config: LabelingConfig | None = None) -> Task:
    """The page's view of an annotation: which steps are rated, current, locked."""
    return _task(annotation, _rows(annotation), config or LabelingConfig.get())


# (step index, text, rating, flagged, time_ms, human_completion): one row per step, in order.
_Row = tuple[int, str, int | None, bool, int | None, dict | None]


# A _Row's fields, read from the annotation: the task's view and every action's locked read.
_STEP_FIELDS = ("step_labels__index", "step_labels__completions__text", "step_labels__completions__rating",
                "step_labels__completions__flagged", "step_labels__time_ms", "step_labels__human_completion")
_ROWS = statements.Compiled(lambda annotation_id: (
    Annotation.objects.filter(pk=annotation_id, step_labels__completions__index=0)
    .order_by("step_labels__index").values_list(*_STEP_FIELDS)
))


def _rows(annotation: Annotation) -> list[_Row]:
    return _ROWS.rows(annotation_id=annotation.pk)


def claimed_view(annotation: Annotation) -> Task:
    """task_view of a task the caller has just claimed (queueing.claim_next): a new one is built
    from the steps the claim wrote, none rated yet (queueing._start), without reading them back;
    a resumed one is read."""
    started = getattr(annotation, "started_steps", None)
    if started is None:
        return task_view(annotation)
    return _task(annotation, [(index, text, None, None, None, None) for index, text in started], LabelingConfig.get())


def _task(annotation: Annotation, rows: list[_Row], config: LabelingConfig) -> Task:
    ratings = [r[2] for r in rows]
    first_error = verdicts.first_error(ratings)
    next_index = _next_index(ratings, config)
    steps = []
    for index, text, rating, flagged, time_ms, human in rows:
        if config.stop_at_first_error and first_error is not None and index > first_error:
            state = "after_error"
        elif rating is not None:
            state = "rated"
        else:
            state = "current" if index == next_index else "locked"
        steps.append(StepRow(index, text, rating, bool(flagged), time_ms or 0, (human or {}).get("text"), state,
                             annotation.is_submitted))
    return Task(annotation, steps, next_index, first_error, _finish_reason(ratings, config), config)


def _next_index(ratings: list[int | None], config: LabelingConfig) -> int | None:
    """The first step still to rate; None when no more ratings are needed."""
    for index, rating in enumerate(ratings):
        if rating is None:
            return index
        if rating == -1 and config.stop_at_first_error:
            return None
    return None


def _finish_reason(ratings: list[int | None], config: LabelingConfig) -> str | None:
    """How the task can be submitted as it stands: found_error, solution, or None (not yet)."""
    first_error = verdicts.first_error(ratings)
    if first_error is not None and config.stop_at_first_error:
        return FinishReason.FOUND_ERROR
    if not ratings or any(r is None for r in ratings):
        return None
    return FinishReason.FOUND_ERROR if first_error is not None else FinishReason.SOLUTION


# What every action reads of the annotation and its queue item, beside each step's row.
_LOCKED_FIELDS = ("status", "created_at", "total_time_ms", "queue_item_id", "is_quality_control",
                  "is_initial_screening", "queue_item__status", "queue_item__leased_to_id",
                  "queue_item__lease_expires_at")
# So the writes are by primary key, not through a join.
_IDS = ("step_labels__completions__id", "step_labels__id")


@dataclass
class _Locked:
    """An annotation read under its lock with its steps, for an action to check and change."""

    annotation: Annotation
    rows: list[_Row]
    completion_ids: list[int]
    step_label_ids: list[int]

    @property
    def ratings(self) -> list[int | None]:
        return [row[2] for row in self.rows]

    def stored_times(self) -> dict[int, tuple[int, int]]:
        """Step index -> (its StepLabel's id, the active ms stored for it)."""
        return {row[0]: (pk, row[4] or 0) for row, pk in zip(self.rows, self.step_label_ids)}


# The annotation (its owner's only), its queue item's lease and each step's row, locked; built
# once per connection (infra/statements.py).
_LOCKED_READ = statements.Compiled(lambda pk, annotator_id: (
    Annotation.objects.select_for_update(of=("self",))
    .filter(pk=pk, annotator_id=annotator_id, step_labels__completions__index=0)
    .order_by("step_labels__index").values_list(*_LOCKED_FIELDS, *_STEP_FIELDS, *_IDS)
))


def _open(annotation: Annotation, config: LabelingConfig) -> _Locked:
    """Lock the annotation for a change (its owner's only; Annotation.DoesNotExist otherwise) and
    read its steps; refuse if submitted; keep its lease. One statement: the same read checks the
    owner and brings the steps and the lease, which is written only when it needs renewing
    (queueing.keep_lease)."""
    found = _LOCKED_READ.rows(pk=annotation.pk, annotator_id=annotation.annotator_id)
    if not found:  # Not theirs, or a solution without steps.
        locked = Annotation.objects.select_for_update().get(pk=annotation.pk, annotator_id=annotation.annotator_id)
        if locked.is_submitted:
            raise AlreadySubmitted(f"annotation {locked.pk} was already submitted")
        queueing.renew_lease(annotation=locked, seconds=config.lease_duration)
        return _Locked(locked, [], [], [])
    head = dict(zip(_LOCKED_FIELDS, found[0]))
    own = {"id": annotation.pk, "annotator_id": annotation.annotator_id,
           **{name: head[name] for name in _LOCKED_FIELDS if not name.startswith("queue_item__")}}
    # from_db takes the values in field order; the fields not read stay deferred.
    names = [f.attname for f in Annotation._meta.concrete_fields if f.attname in own]
    locked = Annotation.from_db(DEFAULT_DB_ALIAS, names, [own[name] for name in names])
    if locked.is_submitted:
        raise AlreadySubmitted(f"annotation {locked.pk} was already submitted")
    queueing.keep_lease(annotation=locked, seconds=config.lease_duration, item_status=head["queue_item__status"],
                        leased_to=head["queue_item__leased_to_id"], expires_at=head["queue_item__lease_expires_at"])
    start, end = len(_LOCKED_FIELDS), len(_LOCKED_FIELDS) + len(_STEP_FIELDS)
    return _Locked(locked, [row[start:end] for row in found], [row[end] for row in found],
                   [row[end + 1] for row in found])


def _check_reachable(ratings: list[int | None], index: int, config: LabelingConfig) -> None:
    """Steps are rated in order: step `index` must be rated already or be the next one."""
    if not 0 <= index < len(ratings):
        raise LabelingError(f"step {index + 1} does not exist (this solution has {len(ratings)} steps)")
    first_error = verdicts.first_error(ratings)
    if config.stop_at_first_error and first_error is not None and index > first_error:
        raise LabelingError(f"step {index + 1} comes after the first error (step {first_error + 1})")
    next_index = _next_index(ratings, config)
    if ratings[index] is None and index != next_index:
        raise LabelingError(f"rate step {(next_index or 0) + 1} first: steps are rated in order")


def rate(*, annotation: Annotation, index: int, rating: int, times: ActiveTime | None = None) -> Task:
    """Rate step `index` -1, 0 or +1 (a rated step may be corrected in place); returns the task now.

    The hot path of labeling: the rows read under the lock, changed as the writes changed
    them, are the task it returns, so answering with the task costs no second read.
    """
    if rating not in RATINGS:
        raise LabelingError(f"rating must be one of -1, 0, 1, not {rating!r}")
    config = LabelingConfig.get()
    with transaction.atomic(), statements.RowWrites() as writes:
        read = _open(annotation, config)
        locked, rows = read.annotation, read.rows
        _check_reachable(read.ratings, index, config)
        writes.update(Completion, read.completion_ids[index], rating=rating)
        # A corrected step is not wrong any more, so its rewrite no longer applies.
        clear_rewrite = rating != -1 and config.allow_human_completion and rows[index][5] is not None
        if clear_rewrite:
            writes.update(StepLabel, read.step_label_ids[index], human_completion=None)
        step_times = _record_time(read, times, writes)
    changed = []
    for i, text, old_rating, flagged, time_ms, human in rows:
        if i in step_times:
            time_ms = max(time_ms or 0, step_times[i])
        if i == index:
            old_rating, human = rating, None if clear_rewrite else human
        changed.append((i, text, old_rating, flagged, time_ms, human))
    before, after = _task(locked, rows, config), _task(locked, changed, config)
    after.changed = _changed_steps(before, after)
    return after


def _changed_steps(before: Task, after: Task) -> set[int]:
    """The steps a change of `before` into `after` redraws: rows that differ, and the old and
    new first error (only the first error offers a corrected step's form)."""
    steps = {new.index for old, new in zip(before.steps, after.steps) if old != new}
    if before.first_error != after.first_error:
        steps |= {i for i in (before.first_error, after.first_error) if i is not None}
    return steps


def flag(*, annotation: Annotation, index: int, flagged: bool, times: ActiveTime | None = None) -> None:
    """Mark step `index` as unsure (or not)."""
    config = LabelingConfig.get()
    with transaction.atomic(), statements.RowWrites() as writes:
        read = _open(annotation, config)
        _check_reachable(read.ratings, index, config)
        writes.update(Completion, read.completion_ids[index], flagged=flagged)
        _record_time(read, times, writes)


def undo(*, annotation: Annotation, index: int, times: ActiveTime | None = None) -> None:
    """Clear the rating of step `index`, the last rated one (no-op if already clear)."""
    with transaction.atomic(), statements.RowWrites() as writes:
        read = _open(annotation, LabelingConfig.get())
        ratings = read.ratings
        if not 0 <= index < len(ratings):
            raise LabelingError(f"step {index + 1} does not exist")
        if any(r is not None for r in ratings[index + 1:]):
            raise LabelingError(f"only the last rated step can be undone, and step {index + 1} is not it")
        writes.update(Completion, read.completion_ids[index], rating=None)
        writes.update(StepLabel, read.step_label_ids[index], human_completion=None)
        _record_time(read, times, writes)


def write_completion(*, annotation: Annotation, index: int, text: str, times: ActiveTime | None = None) -> None:
    """After a -1, write the step as it should have been (PRM800K `human_completion`)."""
    config = LabelingConfig.get()
    text = (text or "").strip()
    if not config.allow_human_completion:
        raise LabelingError("this project does not collect human completions")
    if not text or len(text) > MAX_COMPLETION_CHARS:
        raise LabelingError(f"text: write the corrected step (1 to {MAX_COMPLETION_CHARS} characters)")
    with transaction.atomic(), statements.RowWrites() as writes:
        read = _open(annotation, config)
        ratings = read.ratings
        if not 0 <= index < len(ratings) or ratings[index] != -1:
            raise LabelingError(f"step {index + 1} is not rated -1: only a wrong step can be rewritten")
        human = {"text": text, "rating": None, "flagged": False, "source": "human", "corrected_rating": None}
        writes.update(StepLabel, read.step_label_ids[index], human_completion=human)
        _record_time(read, times, writes)


def heartbeat_allowed(*, user_id: int) -> bool:
    """Whether the user is within STEPWISE_HEARTBEATS_PER_MINUTE, site-wide (infra/throttling.py)."""
    return throttling.check("heartbeat", user_id, (settings.STEPWISE_HEARTBEATS_PER_MINUTE, 60)).allowed


def record_time(*, annotation: Annotation, times: ActiveTime) -> None:
    """Store a report of active time (heartbeats) and keep the lease."""
    with transaction.atomic(), statements.RowWrites() as writes:
        _record_time(_open(annotation, LabelingConfig.get()), times, writes)


def _record_time(read: _Locked, times: ActiveTime | None, writes: statements.RowWrites) -> dict[int, int]:
    """Store a time report on the annotation read under the caller's lock, among the caller's
    writes; returns the per-step times it offered. A stored time only grows, so only a grown
    total and the steps whose time grew are written.
    """
    if times is None:
        return {}
    annotation = read.annotation
    # Never more than the wall-clock time since the task was served.
    ceiling = int((timezone.now() - annotation.created_at) / dt.timedelta(milliseconds=1)) + _TIME_SLACK_MS
    total = min(times.total_ms, ceiling)
    if total > (annotation.total_time_ms or 0):
        writes.update(Annotation, annotation.pk, total_time_ms=total)
        annotation.total_time_ms = total
    offered = {index: min(ms, ceiling) for index, ms in times.steps.items()}
    stored = read.stored_times()
    if not offered.keys() <= stored.keys():
        # Raised inside the caller's transaction, so nothing of this report is kept.
        raise LabelingError("step_ms: every index must be a step of this solution")
    _write_step_times({stored[index][0]: ms for index, ms in offered.items() if ms > stored[index][1]}, writes)
    return offered


def _write_step_times(grown: dict[int, int], writes: statements.RowWrites) -> None:
    """StepLabel id -> its new time, in one statement whatever the number of steps a report
    names (a heartbeat after a pause may name many). One step, a rating's usual case, goes
    with the caller's writes, without the ORM building a CASE."""
    if len(grown) == 1:
        writes.update(StepLabel, *grown, time_ms=next(iter(grown.values())))
    elif grown:
        StepLabel.objects.filter(pk__in=grown).update(time_ms=Case(
            *(When(pk=pk, then=Value(ms)) for pk, ms in grown.items()), output_field=IntegerField()
        ))


def submit(*, annotation: Annotation, finish_reason: str = "", note: str = "",
           times: ActiveTime | None = None) -> str:
    """Finish the task in one transaction; returns its finish reason.

    Without `finish_reason` the ratings decide: found_error after a -1 (stop at first
    error), solution when every step is rated. give_up and bad_problem need a `note`.
    """
    with transaction.atomic():
        return _submit(annotation, finish_reason, note, times)


def submit_and_claim_next(*, annotator, annotation: Annotation, finish_reason: str = "", note: str = "",
                          times: ActiveTime | None = None) -> tuple[str, Annotation | None]:
    """Submit, then claim the annotator's next task (queueing.claim_next), in one transaction:
    two round trips fewer than one each. Returns the finish reason and the next task, None when
    nothing is left or the screening set was failed (the submit stands either way).

    The annotator's claim lock comes first, as in every claim: a claim from another tab then
    waits for the whole of this one, instead of holding that lock while it waits for the item
    this submit finishes, which waits for the lock (a deadlock).
    """
    with transaction.atomic():
        queueing.lock_claims(annotator=annotator)
        reason = _submit(annotation, finish_reason, note, times)
        try:
            return reason, queueing.claim_locked(annotator=annotator)
        except queueing.ScreeningFailed:  # Nothing to claim; the submit stands.
            return reason, None


def _submit(annotation: Annotation, finish_reason: str, note: str, times: ActiveTime | None) -> str:
    """submit's work in the caller's transaction; its writes are made when it returns."""
    config = LabelingConfig.get()
    with statements.RowWrites() as writes:
        read = _open(annotation, config)
        locked, ratings = read.annotation, read.ratings
        reason = _decide(ratings, config, finish_reason, note)
        # Checked against the steps as read (the page reports those about to be dropped too);
        # the times are written with the status below, in the same statement on PostgreSQL.
        _record_time(read, times, writes)
        last = _keep_steps(locked, ratings, reason, config)
        # Every kept step but the last is chosen; the last too unless it is the error found.
        chosen_below = last if reason != FinishReason.FOUND_ERROR and last > 0 and ratings[last - 1] is not None \
            else last - 1
        _CHOOSE.execute(annotation_id=locked.pk, below=chosen_below)
        now = timezone.now()
        finished = {
            "status": Annotation.Status.SUBMITTED, "finish_reason": reason, "timestamp": now, "updated_at": now,
            "finish_note": note.strip() if reason in (FinishReason.GIVE_UP, FinishReason.BAD_PROBLEM) else "",
            "total_time_ms": locked.total_time_ms,
        }
        writes.update(Annotation, locked.pk, **finished)
        queueing.finish_item(annotation=locked, writes=writes)
    # The caller's object as it now stands, without reading it back.
    for name, value in finished.items():
        setattr(annotation, name, value)
    return reason


# Every kept step below `below` is chosen (PRM800K's chosen_completion 0), the rest not.
_CHOOSE = statements.Compiled(lambda annotation_id, below: statements.updating(
    StepLabel.objects.filter(annotation_id=annotation_id),
    chosen_completion=Case(When(index__lt=below, then=Value(0)), default=None, output_field=IntegerField()),
))


def check_note(note: str) -> str:
    """The note stripped, or LabelingError when it is longer than MAX_NOTE_CHARS."""
    note = (note or "").strip()
    if len(note) > MAX_NOTE_CHARS:
        raise LabelingError(f"note: at most {MAX_NOTE_CHARS} characters (this one has {len(note):,})")
    return note


def _decide(ratings: list[int | None], config: LabelingConfig, finish_reason: str, note: str) -> str:
    check_note(note)
    if finish_reason in (FinishReason.GIVE_UP, FinishReason.BAD_PROBLEM):
        if not note.strip():
            raise LabelingError(f"note: say why ({finish_reason.replace('_', ' ')} needs a reason)")
        return finish_reason
    if finish_reason and finish_reason not in FinishReason.values:
        raise LabelingError(f"finish_reason {finish_reason!r} is not one of {', '.join(FinishReason.values)}")
    reason = _finish_reason(ratings, config)
    if reason is None:
        missing = next(i for i, r in enumerate(ratings + [None]) if r is None)
        raise LabelingError(f"step {missing + 1} is not rated yet")
    return reason


def _keep_steps(annotation: Annotation, ratings: list[int | None], reason: str, config: LabelingConfig) -> int:
    """Drop the steps a submitted line does not hold; returns how many steps remain."""
    if reason == FinishReason.FOUND_ERROR and config.stop_at_first_error:
        keep = ratings.index(-1) + 1
    elif reason in (FinishReason.GIVE_UP, FinishReason.BAD_PROBLEM):
        keep = next((i for i, r in enumerate(ratings) if r is None), len(ratings))
    else:
        keep = len(ratings)
    if keep < len(ratings):
        StepLabel.objects.filter(annotation=annotation, index__gte=keep).delete()
    return keep
