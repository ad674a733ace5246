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
import functools
import random
from collections.abc import Iterable
from typing import NamedTuple

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, Max, Min, OuterRef, Q, Subquery
from django.utils import timezone

from annotate.labeling import quality, queue_items, starting
from annotate.labeling.queue_items import withdraw
from annotate.models import Annotation, Generation, LabelingConfig, Project, QueueItem, Solution, Step
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


def start_generation(*, project=None, model_version_name: str = "", note: str = "") -> Generation:
    """Record a new generation of the project's queue: the only place a generation number is decided.

    One past the highest number in use, counting queue items too (databases from before
    generations were recorded have items in numbers no Generation row names); 0 at first.
    """
    project = Project.objects.given(project)
    numbers = [
        Generation.objects.filter(project=project, number__gte=0).aggregate(n=Max("number"))["n"],
        QueueItem.objects.filter(project=project, generation__gte=0).aggregate(n=Max("generation"))["n"],
    ]
    known = [n for n in numbers if n is not None]
    return Generation.objects.create(
        project=project, number=max(known) + 1 if known else 0, model_version_name=model_version_name, note=note
    )


def current_generation(project=None) -> Generation:
    """The project's generation new work is queued in, started (as 0) the first time anything is queued."""
    project = Project.objects.given(project)
    generations = Generation.objects.filter(project=project)
    generation = generations.filter(number=generations.current_number()).first()
    if generation is not None:
        return generation
    try:
        with transaction.atomic():
            return start_generation(project=project, note=DEFAULT_REASON)
    except IntegrityError:  # Another process started it at the same moment.
        return generations.get(number=generations.current_number())


# (solution id, priority, reason, score the selection saw or None)
Pick = tuple[int, float, str, float | None]  # the reason: a QueueItem.Reason (enqueue checks)


def enqueue(*, generation: Generation, picks: Iterable[Pick], model_version_name: str = "",
            size: int | None = None) -> int:
    """Queue picks in a generation: the only writer of ordinary QueueItems. Returns items created.

    Each pick gets `overlap_k` slots (LabelingConfig), so agreement data keeps coming in
    every generation. Waiting items of the project's older generations are retired (leased and
    done ones belong to people). The generation holds at most `size` solutions with open work
    (default: the project's queue size), counting what it already holds, so calling this again
    (a restart, seed_demo) never queues past the cap. Picks already queued are skipped. A
    reason that is not a QueueItem.Reason is refused (ValueError) and nothing is written.
    """
    project_id = generation.project_id
    assert project_id is not None  # never null (the column's default is the sole project)
    config = LabelingConfig.of(project_id)
    size = config.queue_size if size is None else size
    slots = max(1, config.overlap_k)
    demo = set(Solution.objects.filter(project_id=project_id).demo().values_list("pk", flat=True))  # a few hundred
    with transaction.atomic():
        # Serializes writers of one generation, so two callers cannot both fill the cap.
        Generation.objects.select_for_update().filter(pk=generation.pk).first()
        QueueItem.objects.filter(
            project_id=project_id, status=QueueItem.Status.AVAILABLE, generation__lt=generation.number,
            generation__gte=0, is_quality_control=False, is_initial_screening=False,
        ).update(status=QueueItem.Status.RETIRED)
        items = QueueItem.objects.filter(project_id=project_id, generation=generation.number)
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
                QueueItem(project_id=project_id, solution_id=solution_id, generation=generation.number, slot=slot,
                          priority=priority,
                          reason=QueueItem.Reason(reason), model_version_name=model_version_name,
                          score_at_selection=score)
                for slot in range(slots)
            )
        QueueItem.objects.bulk_create(batch, batch_size=2000)
    return len(batch)


def ensure_default_queue(project=None) -> int:
    """Queue the project's unlabeled solutions nobody holds into its current generation, up to the cap.

    The order before any model exists: priority 0, oldest first, reason "default order".
    Gold and screening solutions are served by their own rules, never from here; solutions
    with a waiting, leased or done item anywhere are already someone's work.
    Idempotent; returns how many items it created.
    """
    project = Project.objects.given(project)
    taken = QueueItem.objects.filter(solution=OuterRef("pk")).exclude(status=QueueItem.Status.RETIRED)
    ids = (
        Solution.objects.filter(project=project).unlabeled().filter(is_gold=False).exclude(Exists(taken))
        .order_by("pk").values_list("pk", flat=True).distinct()
    )
    picks = ((solution_id, 0.0, DEFAULT_REASON, None) for solution_id in ids.iterator(chunk_size=2000))
    return enqueue(generation=current_generation(project), picks=picks)


def enqueue_imported(*, project=None, solution_ids: Iterable[int], seed: int | None = None) -> int:
    """Queue just-imported solutions in the current generation, so they are labelable before a rescore.

    None has a score yet, which the selection policy allows for: wrong answers (by grading)
    first, then the rest, each in random order, behind the work already waiting (lower
    priorities) but ahead of the demo pool, which `enqueue` ranks after everything. A model's
    generation also keeps the project's limit per problem (counting what it holds); the default
    order has none. Gold, reference and labeled solutions, and those
    already someone's work, are skipped; the queue size cap holds. The next rescore ranks them
    with the rest. Returns solutions queued.
    """
    project = Project.objects.given(project)
    generation = current_generation(project)
    config = LabelingConfig.of(project)
    rows = _importable(project, list(solution_ids))
    rng = random.Random(seed)
    rng.shuffle(rows)
    rows.sort(key=lambda row: row[2] is not False)  # stable: wrong first, each group still shuffled
    if generation.model_version_name:
        rows = _within_problem_cap(rows, project, generation, config.queue_per_problem)
    held = (
        QueueItem.objects.filter(project=project, generation=generation.number).exclude(status=QueueItem.Status.RETIRED)
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
    return created // max(1, config.overlap_k)


def _importable(project, solution_ids: list[int]) -> list[tuple[int, int, bool | None]]:
    """(id, problem id, is_correct) of the solutions that may be queued as ordinary work, by id."""
    taken = QueueItem.objects.filter(solution=OuterRef("pk")).exclude(status=QueueItem.Status.RETIRED)
    eligible = (Solution.objects.filter(project=project).unlabeled().filter(is_gold=False, is_reference=False)
                .exclude(Exists(taken)))
    rows: list[tuple[int, int, bool | None]] = []
    for start in range(0, len(solution_ids), 2000):  # bounded IN lists (SQLite caps parameters)
        chunk = eligible.filter(pk__in=solution_ids[start : start + 2000])
        rows.extend(chunk.values_list("pk", "problem_id", "is_correct").distinct())
    return sorted(rows)


def _within_problem_cap(rows: list, project: Project, generation: Generation, per_problem: int) -> list:
    held = (
        QueueItem.objects.filter(project=project, generation=generation.number)
        .exclude(status=QueueItem.Status.RETIRED).values_list("solution__problem_id", "solution_id").distinct()
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
            solution=solution, generation=Generation.SCREENING, slot=0, project=solution.project,
            defaults={"is_initial_screening": True, "reason": SCREENING_REASON, "status": QueueItem.Status.AVAILABLE},
        )
        withdraw(solution=solution)
    return item


# The statements every claim runs, built once per connection (infra/statements.py).
_OPEN_TASK = statements.Compiled(lambda annotator_id, project_id: (
    Annotation.objects.in_progress().filter(annotator_id=annotator_id, project_id=project_id)
    .order_by("-created_at").values_list("pk")[:1]
))


def _candidates(annotator_id: int, project_id: int):
    return (
        QueueItem.objects.filter(project_id=project_id, status=QueueItem.Status.AVAILABLE, generation__gte=0)
        .exclude(_not_seen_by(annotator_id)).order_by("-priority", "id")
    )


class Leased(NamedTuple):
    pk: int
    solution_id: int
    generation: int


# Lease the highest-priority available item this annotator has not labeled, in one statement:
# on PostgreSQL concurrent claimers each lock a different row (SKIP LOCKED) instead of racing
# for one; SQLite runs one writer at a time.
_LEASE_NEXT = statements.Compiled(lambda annotator_id, project_id, expires_at: statements.updating(
    QueueItem.objects.filter(status=QueueItem.Status.AVAILABLE, pk=Subquery(
        _candidates(annotator_id, project_id).select_for_update(skip_locked=True, of=("self",)).values("pk")[:1]
    )),
    status=QueueItem.Status.LEASED, leased_to=annotator_id, lease_expires_at=expires_at,
), datetimes=("expires_at",), returning=("id", "solution", "generation"), row=Leased)


def current_task(*, annotator, project=None) -> Annotation | None:
    """The annotator's open task in the project, if any (coming back resumes it)."""
    project = Project.objects.given(project)
    found = _OPEN_TASK.rows(annotator_id=annotator.pk, project_id=project.pk)
    return Annotation.objects.select_related("queue_item").get(pk=found[0][0]) if found else None


def claim_next(*, annotator, project=None, now: dt.datetime | None = None) -> Annotation | None:
    """The annotator's task in the project: the open one if any, else a new one; None when nothing is left.

    Raises ScreeningFailed when the screening set was labeled but not passed.
    """
    project = Project.objects.given(project)
    with transaction.atomic():
        lock_claims(annotator=annotator)
        return claim_locked(annotator=annotator, project=project, now=now)


def lock_claims(*, annotator) -> None:
    """Hold the annotator's claims until the transaction ends: one claim at a time per annotator
    (a double click must not open two tasks)."""
    statements.lock_row(get_user_model(), annotator.pk)


def claim_locked(*, annotator, project=None, now: dt.datetime | None = None) -> Annotation | None:
    """claim_next in the caller's transaction, which holds lock_claims(annotator=annotator)."""
    project = Project.objects.given(project)
    now = now or timezone.now()
    task = current_task(annotator=annotator, project=project)
    if task is not None:
        if queue_items.renew(task, now) == 1:
            return task
        task.delete()  # Its lease lapsed and someone else holds the item now.
    return _new_task(annotator, project, now)


def _new_task(annotator, project, now: dt.datetime) -> Annotation | None:
    config = LabelingConfig.of(project)
    start = functools.partial(starting.begin, annotator, project)
    if config.screening_required:
        status = quality.screening_status(annotator=annotator, project=project)
        if status == quality.Screening.FAILED:
            raise ScreeningFailed("the screening set was not passed; an admin can reset it")
        if status == quality.Screening.PENDING:
            item = _next_screening_item(annotator, project)
            if item is not None:
                return start(item.solution_id, Generation.SCREENING, queue_item_id=item.pk, screening=True)
    if config.qc_rate > 0:  # Else the generation (gold is counted per generation) is not needed.
        generation = Generation.objects.number_of(_CURRENT_GENERATION.rows(project_id=project.pk))
        if _qc_due(annotator, project, generation, config.qc_rate) and (gold := _next_gold(annotator, project)):
            return start(gold, generation, quality_control=True)
    leased = _lease_next(annotator, project, now, config.lease_duration)
    if leased is None:
        return None
    return start(leased.solution_id, leased.generation, queue_item_id=leased.pk)


def _not_seen_by(annotator) -> Exists:
    """Items the annotator (a user or a user's id) has not labeled."""
    return Exists(Annotation.objects.filter(annotator=annotator, solution=OuterRef("solution_id")))


def _next_screening_item(annotator, project) -> QueueItem | None:
    return (
        QueueItem.objects.filter(project=project, generation=Generation.SCREENING)
        .exclude(status=QueueItem.Status.RETIRED)
        .exclude(_not_seen_by(annotator)).order_by("-priority", "id").first()
    )


# Where gold falls in an annotator's work is drawn, not every (1 / rate)th task: a fixed period
# would tell them which task is gold. The threshold is drawn anew at each claim, so their gold
# count stays within two tasks of rate x their tasks (it corrects itself), while the gap between
# two gold items varies from none to about twice the mean.
_gold_draw = random.Random()


# Compiled, as the counts below: a gold project's every claim reads it.
_CURRENT_GENERATION = statements.Compiled(
    lambda project_id: Generation.objects.filter(project_id=project_id).current_number_query())


# The annotator's gold and other tasks in a generation (no row when they have none), from the
# annotator and generation's index alone: an index-only scan on PostgreSQL (the index carries the
# flag counted). Compiled: building the aggregate cost the ORM more than PostgreSQL spent on it.
_TASK_COUNTS = statements.Compiled(lambda annotator_id, project_id, generation: (
    Annotation.objects.filter(annotator_id=annotator_id, project_id=project_id, generation=generation)
    .values("annotator_id")
    .annotate(qc=Count("is_quality_control", filter=Q(is_quality_control=True)),
              real=Count("is_quality_control", filter=Q(is_quality_control=False)))
    .values_list("qc", "real")
))


def _qc_due(annotator, project, generation: int, rate: float) -> bool:
    """Whether the next task should be gold, keeping gold at `rate` (> 0) of the annotator's tasks in
    the project's generation."""
    found = _TASK_COUNTS.rows(annotator_id=annotator.pk, project_id=project.pk, generation=generation)
    qc, real = found[0] if found else (0, 0)
    return (qc + _gold_draw.uniform(0.5, 1.5)) * (1 - rate) <= real * rate


# Random order, so annotators cannot learn which item is gold by its order either. Compiled: while
# an annotator is due gold and the pool has none left for them, every claim asks again.
_NEXT_GOLD = statements.Compiled(lambda annotator_id, project_id: (
    Solution.objects.filter(project_id=project_id, is_gold=True)
    .exclude(Exists(Annotation.objects.filter(annotator_id=annotator_id, solution=OuterRef("pk"))))
    .order_by("?").values_list("pk")[:1]
))


def _next_gold(annotator, project) -> int | None:
    """A gold solution of the project's the annotator has not labeled, drawn at random."""
    found = _NEXT_GOLD.rows(annotator_id=annotator.pk, project_id=project.pk)
    return found[0][0] if found else None


# Claims put lapsed leases back at most every tenth of a lease, and at least every 5 s, per
# process: the UPDATE visits every leased item (and, until a vacuum, every index entry of one),
# 1.7 ms of PostgreSQL's time on each claim of the 50k bench pool, while an item whose lease
# lapsed can wait that little longer.
_EXPIRY = memo.Pacer()
_EXPIRY_EVERY_SECONDS = 5


def _expiry_pace(lease_seconds: int) -> float:
    return min(_EXPIRY_EVERY_SECONDS, lease_seconds / 10)


def _lease_next(annotator, project, now: dt.datetime, seconds: int) -> Leased | None:
    """Lease the project's highest-priority available item this annotator has not labeled."""
    if _EXPIRY.due(now, _expiry_pace(seconds)):
        queue_items.expire_leases(now=now)
    found = _LEASE_NEXT.rows(annotator_id=annotator.pk, project_id=project.pk,
                             expires_at=now + dt.timedelta(seconds=seconds))
    return found[0] if found else None
