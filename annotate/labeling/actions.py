"""Labeling one solution: rate, flag, undo, correct, write a step, submit.

Every action is saved at once and says what the state should be (rate step 3 as +1,
flag step 2 on), never "toggle": a repeated POST changes nothing. Each reads the task, which
finds only the annotator's own, before it judges the input, and writes what it changes together,
as of that read or not at all (annotate.labeling.rows); once submitted, an annotation is frozen and
every change raises AlreadySubmitted (HTTP 409). Each may carry a report of active time
(annotate.labeling.timing), stored with its writes.
"""
from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from annotate.labeling import assistance, queue_items, queueing, tasks, verdicts
from annotate.labeling.refusals import LabelingError
from annotate.labeling.rows import AnnotationOrRef, AnnotationRow, Change, act, change
from annotate.labeling.tasks import Task
from annotate.labeling.timing import ActiveTime, store_times
from annotate.models import Annotation, Assistance, Completion, FinishReason, LabelingConfig, Project, StepLabel
from steps import ratings as rating_values
from steps.ratings import Rating

MAX_COMPLETION_CHARS = 5000
# A reason given on submit (give up, bad problem) or with a reviewer's override; the page
# says the same, but only the server's check binds (9 MB notes were stored before it).
MAX_NOTE_CHARS = 2000
# What the annotator writes after a -1, in PRM800K's human_completion shape.
_HUMAN = {"rating": None, "flagged": False, "source": "human", "corrected_rating": None}

def parse_rating(value: object) -> Rating:
    """A rating sent by a page (`steps.ratings`), or LabelingError saying what is allowed."""
    try:
        return rating_values.parse(value)
    except rating_values.InvalidRating as error:
        raise LabelingError(f"rating {error}") from None


def rate(*, annotation: AnnotationOrRef, index: int, rating: int, times: ActiveTime | None = None) -> Task:
    """Rate step `index` -1, 0 or +1 (a rated step may be corrected in place); returns the task now.

    The hot path of labeling: the rows as read, changed as the writes change them, are the task
    it returns, so answering with the task costs no second read.
    """
    config = LabelingConfig.of(annotation.project_id)

    def rate_step(read: Change) -> Task:
        given = parse_rating(rating)
        _check_reachable(read.ratings, index, config)
        _check_second_look(read, index)
        read.writes.update(Completion, read.completion_ids[index], rating=given)
        # A corrected step is not wrong any more, so its rewrite no longer applies.
        rewritten = read.rows[index].human_completion is not None
        clear_rewrite = not given.is_error and config.allow_human_completion and rewritten
        if clear_rewrite:
            read.writes.update(StepLabel, read.step_label_ids[index], human_completion=None)
        seen, suggestion = _assisted(read, config, index, given)
        stored = store_times(read, times)
        return _rated(read, config, index, given, clear_rewrite, stored, seen, suggestion)

    return act(annotation, config, rate_step)


def _assisted(read: Change, config: LabelingConfig, index: int,
              rating: int) -> tuple[dict | None, assistance.Suggestion | None]:
    """What the rating keeps of the model's and the judge's view (written with it), and the guess
    the page shows. A blind project reads nothing more."""
    prior = read.rows[index].assistance
    solution_id = read.annotation.solution_id
    ps = assistance.model_ps(solution_id=solution_id) if config.assistance != Assistance.BLIND else []
    judge = assistance.judge_for(config=config, prior=prior, solution_id=solution_id, index=index)
    seen = assistance.record(config=config, prior=prior, rating=rating, index=index, ps=ps, judge=judge)
    if seen != prior:
        read.writes.update(StepLabel, read.step_label_ids[index], assistance=seen)
    return seen, assistance.suggestion(ps) if config.assistance == Assistance.SUGGEST else None


def _check_second_look(read: Change, index: int) -> None:
    """A second look waiting for its answer is answered before any other step is rated."""
    waiting = assistance.waiting_index([row.assistance for row in read.rows], read.ratings)
    if waiting is not None and waiting != index:
        raise LabelingError(f"the model doubts step {waiting + 1}: rate it again (the same rating keeps it) first")


def _rated(read: Change, config: LabelingConfig, index: int, rating: int, clear_rewrite: bool,
           stored: ActiveTime | None, seen: dict | None, suggestion: assistance.Suggestion | None) -> Task:
    """The task after a rating, from its rows as read and what the rating wrote, with the steps
    whose rows it changed."""
    now = list(read.rows)
    for i, ms in (stored.steps if stored else {}).items():
        now[i] = now[i]._replace(time_ms=ms)
    rewrite = None if clear_rewrite else now[index].human_completion
    now[index] = now[index]._replace(rating=rating, human_completion=rewrite, assistance=seen)
    before = tasks.build(read.annotation, read.rows, config, suggestion)
    after = tasks.build(read.annotation, now, config, suggestion)
    after.changed = _changed_steps(before, after)
    return after


def _changed_steps(before: Task, after: Task) -> set[int]:
    """The steps a change of `before` into `after` redraws: rows that differ, and the old and
    new first error (only the first error offers a corrected step's form)."""
    steps = {new.index for old, new in zip(before.steps, after.steps) if old != new}
    if before.first_error != after.first_error:
        steps |= {i for i in (before.first_error, after.first_error) if i is not None}
    return steps


def flag(*, annotation: AnnotationOrRef, index: int, flagged: bool, times: ActiveTime | None = None) -> None:
    """Mark step `index` as unsure (or not)."""
    config = LabelingConfig.of(annotation.project_id)

    def flag_step(read: Change) -> None:
        _check_reachable(read.ratings, index, config)
        read.writes.update(Completion, read.completion_ids[index], flagged=flagged)
        store_times(read, times)

    act(annotation, config, flag_step)


def undo(*, annotation: AnnotationOrRef, index: int, times: ActiveTime | None = None) -> None:
    """Clear the rating of step `index`, the last rated one (no-op if already clear)."""

    def undo_step(read: Change) -> None:
        ratings = read.ratings
        if not 0 <= index < len(ratings):
            raise LabelingError(f"step {index + 1} does not exist")
        if any(r is not None for r in ratings[index + 1:]):
            raise LabelingError(f"only the last rated step can be undone, and step {index + 1} is not it")
        read.writes.update(Completion, read.completion_ids[index], rating=None)
        read.writes.update(StepLabel, read.step_label_ids[index], human_completion=None)
        store_times(read, times)

    act(annotation, LabelingConfig.of(annotation.project_id), undo_step)


def write_completion(*, annotation: AnnotationOrRef, index: int, text: str, times: ActiveTime | None = None) -> None:
    """After a -1, write the step as it should have been (PRM800K `human_completion`)."""
    config = LabelingConfig.of(annotation.project_id)
    text = (text or "").strip()

    def rewrite_step(read: Change) -> None:
        if not config.allow_human_completion:
            raise LabelingError("this project does not collect human completions")
        if not text or len(text) > MAX_COMPLETION_CHARS:
            raise LabelingError(f"text: write the corrected step (1 to {MAX_COMPLETION_CHARS} characters)")
        ratings = read.ratings
        if not 0 <= index < len(ratings) or not rating_values.is_error(ratings[index]):
            raise LabelingError(f"step {index + 1} is not rated -1: only a wrong step can be rewritten")
        read.writes.update(StepLabel, read.step_label_ids[index], human_completion={"text": text, **_HUMAN})
        store_times(read, times)

    act(annotation, config, rewrite_step)


def _check_reachable(ratings: list[int | None], index: int, config: LabelingConfig) -> None:
    """Steps are rated in order: step `index` must be rated already or be the next one."""
    if not 0 <= index < len(ratings):
        raise LabelingError(f"step {index + 1} does not exist (this solution has {len(ratings)} steps)")
    first_error = verdicts.first_error(ratings)
    if config.stop_at_first_error and first_error is not None and index > first_error:
        raise LabelingError(f"step {index + 1} comes after the first error (step {first_error + 1})")
    next_index = tasks.next_index(ratings, config)
    if ratings[index] is None and index != next_index:
        raise LabelingError(f"rate step {(next_index or 0) + 1} first: steps are rated in order")


def submit(*, annotation: AnnotationOrRef, finish_reason: str = "", note: str = "",
           times: ActiveTime | None = None) -> str:
    """Finish the task in one transaction; returns its finish reason.

    Without `finish_reason` the ratings decide: found_error after a -1 (stop at first
    error), solution when every step is rated. give_up and bad_problem need a `note`.
    """
    with transaction.atomic():
        return _submit(annotation, finish_reason, note, times)


def submit_and_claim_next(*, annotator, project=None, annotation: AnnotationOrRef, finish_reason: str = "",
                          note: str = "", times: ActiveTime | None = None) -> tuple[str, Annotation | None]:
    """Submit, then claim the annotator's next task (queueing.claim_next), in one transaction:
    two round trips fewer than one each. Returns the finish reason and the next task, None when
    nothing is left or the screening set was failed (the submit stands either way).

    The annotator's claim lock comes first, as in every claim: a claim from another tab then
    waits for the whole of this one, instead of holding that lock while it waits for the item
    this submit finishes, which waits for the lock (a deadlock).
    """
    project = Project.objects.given(project)
    with transaction.atomic():
        queueing.lock_claims(annotator=annotator)
        reason = _submit(annotation, finish_reason, note, times)
        try:
            return reason, queueing.claim_locked(annotator=annotator, project=project)
        except queueing.ScreeningFailed:  # Nothing to claim; the submit stands.
            return reason, None


def _submit(annotation: AnnotationOrRef, finish_reason: str, note: str, times: ActiveTime | None) -> str:
    """submit's work in the caller's transaction; its writes are made when it returns."""
    config = LabelingConfig.of(annotation.project_id)
    with change(annotation, config) as read:
        locked, ratings, writes = read.annotation, read.ratings, read.writes
        reason = _decide(ratings, config, finish_reason, note)
        if reason not in (FinishReason.GIVE_UP, FinishReason.BAD_PROBLEM):
            _check_second_look(read, -1)
        # Checked against the steps as read (the page reports those about to be dropped too);
        # the times are written with the status below, in the same statement on PostgreSQL.
        stored = store_times(read, times)
        last = _keep_steps(locked, ratings, reason, config)
        # Which kept step was gone on from is the verdict rule's (a rewritten step is not: its
        # human completion is); written with the status, in the same statement on PostgreSQL.
        rewritten = [row[5] is not None for row in read.rows[:last]]
        for index, chosen in enumerate(verdicts.chosen_at_submit(ratings[:last], rewritten, reason)):
            writes.update(StepLabel, read.step_label_ids[index], chosen_completion=chosen)
        finished = {
            "status": Annotation.Status.SUBMITTED, "finish_reason": reason, "timestamp": timezone.now(),
            "finish_note": note.strip() if reason in (FinishReason.GIVE_UP, FinishReason.BAD_PROBLEM) else "",
        }
        writes.update(Annotation, locked.pk, **finished)
        queue_items.finish_item(annotation=locked, writes=writes)
    if isinstance(annotation, Annotation):  # The caller's object as it now stands, without reading it back.
        total = {"total_time_ms": stored.total_ms} if stored else {}
        for name, value in {**finished, **total}.items():
            setattr(annotation, name, value)
    return reason


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
    reason = tasks.finish_reason(ratings, config)
    if reason is None:
        missing = next(i for i, r in enumerate(ratings + [None]) if r is None)
        raise LabelingError(f"step {missing + 1} is not rated yet")
    return reason


def _keep_steps(annotation: AnnotationRow, ratings: list[int | None], reason: str, config: LabelingConfig) -> int:
    """Drop the steps a submitted line does not hold; returns how many steps remain."""
    if reason == FinishReason.FOUND_ERROR and config.stop_at_first_error:
        keep = ratings.index(Rating.NEGATIVE) + 1
    elif reason in (FinishReason.GIVE_UP, FinishReason.BAD_PROBLEM):
        keep = next((i for i, r in enumerate(ratings) if r is None), len(ratings))
    else:
        keep = len(ratings)
    if keep < len(ratings):
        StepLabel.objects.filter(annotation_id=annotation.pk, index__gte=keep).delete()
    return keep
