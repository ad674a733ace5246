"""Who labels what next: the queue's generations and items, claims, gold interleave and the
screening gate.

An annotator's open task is their in-progress Annotation. Ordinary work comes from
QueueItems, leased to one annotator at a time (annotate.labeling.queue_items keeps the lease
from there on). Gold items (quality control) and the screening set (generation -1) are shown
to *every* annotator, so they are never leased: the annotator's Annotation on them is the
whole record. Ordinary QueueItems are written only by `enqueue`, in a generation numbered
only by `start_generation`: the default order, freshly imported solutions (`enqueue_imported`)
and selection (in scoring, which hands over its picks) go through the same rules for overlap,
retirement and the queue size cap. The demo pool (seed_demo) is served after every other
solution: `enqueue` ranks its items below all the rest (DEMO_DEMOTION), so a newcomer's own
import is what they label first.
"""
from __future__ import annotations

import datetime as dt
import random
from collections.abc import Iterable
from typing import NamedTuple

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, Max, Min, OuterRef, Q, Subquery
from django.utils import timezone

from annotate.labeling import quality, queue_items, starting
from annotate.labeling.queue_items import withdraw
from annotate.models import Annotation, Generation, LabelingConfig, QueueItem, Solution, Step
from infra import memo, statements

# The reasons this side gives queue items (QueueItem.Reason holds every one).
DEFAULT_REASON = QueueItem.Reason.DEFAULT
IMPORTED_REASON = QueueItem.Reason.IMPORTED
IMPORTED_WRONG_REASON = QueueItem.Reason.IMPORTED_WRONG
SCREENING_REASON = QueueItem.Reason.SCREENING
# Taken off a demo solution's priority: more than any span of real priorities (selection's run
# from the queue size down to 1, imports' from 0 down by one per solution), so demo items wait
# behind every other item, in their own order among themselves.
DEMO_DEMOTION = 1e12
# Imported solutions that change the pool enough to analyze its tables again (refresh_statistics).
STATISTICS_AFTER = 1000


class ScreeningFailed(Exception):
    """The annotator did not pass the screening set, so gets no real tasks."""


def labeler_id(user) -> str:
    """The PRM800K `labeler` of a local annotator."""
    return user.get_username()


def start_generation(*, model_version_name: str = "", note: str = "") -> Generation:
    """Record a new generation of the queue: the only place a generation number is decided.

    One past the highest number in use, counting queue items too (databases from before
    generations were recorded have items in numbers no Generation row names); 0 at first.
    """
    numbers = [
        Generation.objects.filter(number__gte=0).aggregate(n=Max("number"))["n"],
        QueueItem.objects.filter(generation__gte=0).aggregate(n=Max("generation"))["n"],
    ]
    known = [n for n in numbers if n is not None]
    return Generation.objects.create(
        number=max(known) + 1 if known else 0, model_version_name=model_version_name, note=note
    )


def current_generation() -> Generation:
    """The generation new work is queued in, started (as 0) the first time anything is queued."""
    number = Generation.objects.current_number()
    generation = Generation.objects.filter(number=number).first()
    if generation is not None:
        return generation
    try:
        with transaction.atomic():
            return start_generation(note=DEFAULT_REASON)
    except IntegrityError:  # Another process started it at the same moment.
        return Generation.objects.get(number=Generation.objects.current_number())


# (solution id, priority, reason, score the selection saw or None)
Pick = tuple[int, float, str, float | None]  # the reason: a QueueItem.Reason (enqueue checks)


def enqueue(*, generation: Generation, picks: Iterable[Pick], model_version_name: str = "",
            size: int | None = None) -> int:
    """Queue picks in a generation: the only writer of ordinary QueueItems. Returns items created.

    Each pick gets `overlap_k` slots (LabelingConfig), so agreement data keeps coming in
    every generation. Waiting items of older generations are retired (leased and done ones
    belong to people). The generation holds at most `size` solutions with open work
    (default STEPWISE_QUEUE_SIZE), counting what it already holds, so calling this again
    (a restart, seed_demo) never queues past the cap. Picks already queued are skipped. A
    reason that is not a QueueItem.Reason is refused (ValueError) and nothing is written.
    """
    size = settings.STEPWISE_QUEUE_SIZE if size is None else size
    slots = max(1, LabelingConfig.get().overlap_k)
    demo = set(Solution.objects.demo().values_list("pk", flat=True))  # a few hundred at most
    with transaction.atomic():
        # Serializes writers of one generation, so two callers cannot both fill the cap.
        Generation.objects.select_for_update().filter(pk=generation.pk).first()
        QueueItem.objects.filter(
            status=QueueItem.Status.AVAILABLE, generation__lt=generation.number, generation__gte=0,
            is_quality_control=False, is_initial_screening=False,
        ).update(status=QueueItem.Status.RETIRED)
        items = QueueItem.objects.filter(generation=generation.number)
        queued = set(items.values_list("solution_id", flat=True))
        open_now = items.filter(status__in=[QueueItem.Status.AVAILABLE, QueueItem.Status.LEASED])
        room = size - open_now.values("solution_id").distinct().count()
        batch: list[QueueItem] = []
        for solution_id, priority, reason, score in picks:
            if room <= 0:
                break
            if solution_id in queued:
                continue
            queued.add(solution_id)
            room -= 1
            if solution_id in demo:
                priority -= DEMO_DEMOTION
            batch.extend(
                QueueItem(solution_id=solution_id, generation=generation.number, slot=slot, priority=priority,
                          reason=QueueItem.Reason(reason), model_version_name=model_version_name,
                          score_at_selection=score)
                for slot in range(slots)
            )
        QueueItem.objects.bulk_create(batch, batch_size=2000)
    return len(batch)


def ensure_default_queue() -> int:
    """Queue unlabeled solutions nobody holds into the current generation, up to the cap.

    The order before any model exists: priority 0, oldest first, reason "default order".
    Gold and screening solutions are served by their own rules, never from here; solutions
    with a waiting, leased or done item anywhere are already someone's work.
    Idempotent; returns how many items it created.
    """
    taken = QueueItem.objects.filter(solution=OuterRef("pk")).exclude(status=QueueItem.Status.RETIRED)
    ids = (
        Solution.objects.unlabeled().filter(is_gold=False).exclude(Exists(taken))
        .order_by("pk").values_list("pk", flat=True).distinct()
    )
    picks = ((solution_id, 0.0, DEFAULT_REASON, None) for solution_id in ids.iterator(chunk_size=2000))
    return enqueue(generation=current_generation(), picks=picks)


def enqueue_imported(*, solution_ids: Iterable[int], seed: int | None = None) -> int:
    """Queue just-imported solutions in the current generation, so they are labelable before a rescore.

    None has a score yet, which the selection policy allows for: wrong answers (by grading)
    first, then the rest, each in random order, behind the work already waiting (lower
    priorities) but ahead of the demo pool, which `enqueue` ranks after everything. A model's
    generation also keeps its limit per problem (STEPWISE_QUEUE_PER_PROBLEM, counting what it
    holds); the default order has none. Gold, reference and labeled solutions, and those
    already someone's work, are skipped; the queue size cap holds. The next rescore ranks them
    with the rest. Returns solutions queued.
    """
    generation = current_generation()
    rows = _importable(list(solution_ids))
    rng = random.Random(seed)
    rng.shuffle(rows)
    rows.sort(key=lambda row: row[2] is not False)  # stable: wrong first, each group still shuffled
    if generation.model_version_name:
        rows = _within_problem_cap(rows, generation, settings.STEPWISE_QUEUE_PER_PROBLEM)
    held = (
        QueueItem.objects.filter(generation=generation.number).exclude(status=QueueItem.Status.RETIRED)
        .exclude(solution__in=Solution.objects.demo())  # demoted below everything anyway
    )
    lowest = min(held.aggregate(p=Min("priority"))["p"] or 0.0, 0.0)
    picks = [
        (pk, lowest - 1 - rank, IMPORTED_WRONG_REASON if is_correct is False else IMPORTED_REASON, None)
        for rank, (pk, _, is_correct) in enumerate(rows)
    ]
    created = enqueue(generation=generation, picks=picks, model_version_name=generation.model_version_name)
    if len(rows) >= STATISTICS_AFTER:
        # On a 50,000-solution pool with no statistics a claim's gold draw scanned every solution
        # (8 ms instead of 0.3) until autovacuum looked, and forever where it is off.
        statements.refresh_statistics(Solution, Step, QueueItem)
    return created // max(1, LabelingConfig.get().overlap_k)


def _importable(solution_ids: list[int]) -> list[tuple[int, int, bool | None]]:
    """(id, problem id, is_correct) of the solutions that may be queued as ordinary work, by id."""
    taken = QueueItem.objects.filter(solution=OuterRef("pk")).exclude(status=QueueItem.Status.RETIRED)
    eligible = Solution.objects.unlabeled().filter(is_gold=False, is_reference=False).exclude(Exists(taken))
    rows: list[tuple[int, int, bool | None]] = []
    for start in range(0, len(solution_ids), 2000):  # bounded IN lists (SQLite caps parameters)
        chunk = eligible.filter(pk__in=solution_ids[start : start + 2000])
        rows.extend(chunk.values_list("pk", "problem_id", "is_correct").distinct())
    return sorted(rows)


def _within_problem_cap(rows: list, generation: Generation, per_problem: int) -> list:
    held = (
        QueueItem.objects.filter(generation=generation.number).exclude(status=QueueItem.Status.RETIRED)
        .values_list("solution__problem_id", "solution_id").distinct()
    )
    counts: dict[int, int] = {}
    for problem_id, _ in held:
        counts[problem_id] = counts.get(problem_id, 0) + 1
    kept = []
    for row in rows:
        if counts.get(row[1], 0) < per_problem:
            counts[row[1]] = counts.get(row[1], 0) + 1
            kept.append(row)
    return kept


def add_to_screening(*, solution: Solution) -> QueueItem:
    """Put a (gold) solution in the screening set that every annotator labels first."""
    with transaction.atomic():
        item, _ = QueueItem.objects.update_or_create(
            solution=solution, generation=Generation.SCREENING, slot=0,
            defaults={"is_initial_screening": True, "reason": SCREENING_REASON, "status": QueueItem.Status.AVAILABLE},
        )
        withdraw(solution=solution)
    return item


# The statements every claim runs, built once per connection (infra/statements.py).
_OPEN_TASK = statements.Compiled(lambda annotator_id: (
    Annotation.objects.in_progress().filter(annotator_id=annotator_id).order_by("-created_at").values_list("pk")[:1]
))


def _candidates(annotator_id: int):
    return (
        QueueItem.objects.filter(status=QueueItem.Status.AVAILABLE, generation__gte=0)
        .exclude(_not_seen_by(annotator_id)).order_by("-priority", "id")
    )


class Leased(NamedTuple):
    pk: int
    solution_id: int
    generation: int


# Lease the highest-priority available item this annotator has not labeled, in one statement:
# on PostgreSQL concurrent claimers each lock a different row (SKIP LOCKED) instead of racing
# for one; SQLite runs one writer at a time.
_LEASE_NEXT = statements.Compiled(lambda annotator_id, expires_at: statements.updating(
    QueueItem.objects.filter(status=QueueItem.Status.AVAILABLE, pk=Subquery(
        _candidates(annotator_id).select_for_update(skip_locked=True, of=("self",)).values("pk")[:1]
    )),
    status=QueueItem.Status.LEASED, leased_to=annotator_id, lease_expires_at=expires_at,
), datetimes=("expires_at",), returning=("id", "solution", "generation"), row=Leased)


def current_task(*, annotator) -> Annotation | None:
    """The annotator's open task, if any (coming back resumes it)."""
    found = _OPEN_TASK.rows(annotator_id=annotator.pk)
    return Annotation.objects.select_related("queue_item").get(pk=found[0][0]) if found else None


def claim_next(*, annotator, now: dt.datetime | None = None) -> Annotation | None:
    """The annotator's task: the open one if any, else a new one; None when nothing is left.

    Raises ScreeningFailed when the screening set was labeled but not passed.
    """
    with transaction.atomic():
        lock_claims(annotator=annotator)
        return claim_locked(annotator=annotator, now=now)


def lock_claims(*, annotator) -> None:
    """Hold the annotator's claims until the transaction ends: one claim at a time per annotator
    (a double click must not open two tasks)."""
    statements.lock_row(get_user_model(), annotator.pk)


def claim_locked(*, annotator, now: dt.datetime | None = None) -> Annotation | None:
    """claim_next in the caller's transaction, which holds lock_claims(annotator=annotator)."""
    now = now or timezone.now()
    task = current_task(annotator=annotator)
    if task is not None:
        if queue_items.renew(task, now) == 1:
            return task
        task.delete()  # Its lease lapsed and someone else holds the item now.
    return _new_task(annotator, now)


def _new_task(annotator, now: dt.datetime) -> Annotation | None:
    config = LabelingConfig.get()
    if config.screening_required:
        status = quality.screening_status(annotator=annotator)
        if status == quality.Screening.FAILED:
            raise ScreeningFailed("the screening set was not passed; an admin can reset it")
        if status == quality.Screening.PENDING:
            item = _next_screening_item(annotator)
            if item is not None:
                return _start(annotator, item.solution_id, Generation.SCREENING, queue_item_id=item.pk, screening=True)
    if config.qc_rate > 0:  # Else the generation (gold is counted per generation) is not needed.
        generation = Generation.objects.number_of(_CURRENT_GENERATION.rows())
        if _qc_due(annotator, generation, config.qc_rate) and (gold := _next_gold(annotator)) is not None:
            return _start(annotator, gold, generation, quality_control=True)
    leased = _lease_next(annotator, now, config.lease_duration)
    if leased is None:
        return None
    return _start(annotator, leased.solution_id, leased.generation, queue_item_id=leased.pk)


def _not_seen_by(annotator) -> Exists:
    """Items the annotator (a user or a user's id) has not labeled."""
    return Exists(Annotation.objects.filter(annotator=annotator, solution=OuterRef("solution_id")))


def _next_screening_item(annotator) -> QueueItem | None:
    return (
        QueueItem.objects.filter(generation=Generation.SCREENING).exclude(status=QueueItem.Status.RETIRED)
        .exclude(_not_seen_by(annotator)).order_by("-priority", "id").first()
    )


# Where gold falls in an annotator's work is drawn, not every (1 / rate)th task: a fixed period
# would tell them which task is gold. The threshold is drawn anew at each claim, so their gold
# count stays within two tasks of rate x their tasks (it corrects itself), while the gap between
# two gold items varies from none to about twice the mean.
_gold_draw = random.Random()


# Compiled, as the counts below: a gold project's every claim reads it.
_CURRENT_GENERATION = statements.Compiled(lambda: Generation.objects.current_number_query())


# The annotator's gold and other tasks in a generation (no row when they have none), from the
# annotator and generation's index alone: an index-only scan on PostgreSQL (the index carries the
# flag counted). Compiled: building the aggregate cost the ORM more than PostgreSQL spent on it.
_TASK_COUNTS = statements.Compiled(lambda annotator_id, generation: (
    Annotation.objects.filter(annotator_id=annotator_id, generation=generation).values("annotator_id")
    .annotate(qc=Count("is_quality_control", filter=Q(is_quality_control=True)),
              real=Count("is_quality_control", filter=Q(is_quality_control=False)))
    .values_list("qc", "real")
))


def _qc_due(annotator, generation: int, rate: float) -> bool:
    """Whether the next task should be gold, keeping gold at `rate` (> 0) of the annotator's tasks in
    this generation."""
    found = _TASK_COUNTS.rows(annotator_id=annotator.pk, generation=generation)
    qc, real = found[0] if found else (0, 0)
    return (qc + _gold_draw.uniform(0.5, 1.5)) * (1 - rate) <= real * rate


# Random order, so annotators cannot learn which item is gold by its order either. Compiled: while
# an annotator is due gold and the pool has none left for them, every claim asks again.
_NEXT_GOLD = statements.Compiled(lambda annotator_id: (
    Solution.objects.filter(is_gold=True)
    .exclude(Exists(Annotation.objects.filter(annotator_id=annotator_id, solution=OuterRef("pk"))))
    .order_by("?").values_list("pk")[:1]
))


def _next_gold(annotator) -> int | None:
    """A gold solution's id the annotator has not labeled, drawn at random."""
    found = _NEXT_GOLD.rows(annotator_id=annotator.pk)
    return found[0][0] if found else None


# Claims put lapsed leases back at most every tenth of a lease, and at least every 5 s, per
# process: the UPDATE visits every leased item (and, until a vacuum, every index entry of one),
# 1.7 ms of PostgreSQL's time on each claim of the 50k bench pool, while an item whose lease
# lapsed can wait that little longer.
_EXPIRY = memo.Pacer()
_EXPIRY_EVERY_SECONDS = 5


def _expiry_pace(lease_seconds: int) -> float:
    return min(_EXPIRY_EVERY_SECONDS, lease_seconds / 10)


def _lease_next(annotator, now: dt.datetime, seconds: int) -> Leased | None:
    """Lease the highest-priority available item this annotator has not labeled."""
    if _EXPIRY.due(now, _expiry_pace(seconds)):
        queue_items.expire_leases(now=now)
    found = _LEASE_NEXT.rows(annotator_id=annotator.pk, expires_at=now + dt.timedelta(seconds=seconds))
    return found[0] if found else None


def _start(annotator, solution_id: int, generation: int, *, queue_item_id: int | None = None,
           quality_control: bool = False, screening: bool = False) -> Annotation:
    annotation = Annotation(
        solution_id=solution_id, annotator=annotator, labeler=labeler_id(annotator), generation=generation,
        queue_item_id=queue_item_id, is_quality_control=quality_control, is_initial_screening=screening,
    )
    # The steps as just written, none rated: the claim's answer is built from them instead of
    # reading them back (tasks.claimed_view).
    annotation.started_steps = starting.start(annotation)  # type: ignore[attr-defined]  # a claim's extra
    return annotation


def available_count() -> int:
    return QueueItem.objects.filter(status=QueueItem.Status.AVAILABLE, generation__gte=0).count()
