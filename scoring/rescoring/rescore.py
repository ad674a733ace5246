"""Rescoring the pool: database read -> tokenize -> forward -> database write, in chunks.

Every write is keyed (one score per step and model version, one per solution and version)
and inserted with ignore_conflicts, so a chunk that runs twice writes nothing twice. Solutions
already scored by a version are skipped before anything is tokenized: an unchanged pool with
the same model costs no forward pass at all.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from annotate.models import Solution, Step
from annotate.models.jobs import JobState, heartbeats, holder_gone, this_worker
from scoring.core.step_scores import aggregate
from scoring.models import ModelVersion, RescoreChunk, RescoreJob, SolutionScore, StepScore
from scoring.store import registry

if TYPE_CHECKING:
    from scoring.core.prm import LoadedPRM
    from scoring.store.remote_scorer import RemotePRM


def unscored_solution_ids(*, model_version: ModelVersion, solution_ids: Sequence[int] | None = None) -> list[int]:
    """Solutions with steps that this version has not scored yet, in id order."""
    solutions = Solution.objects.filter(steps__isnull=False)
    if solution_ids is not None:
        solutions = solutions.filter(pk__in=solution_ids)
    solutions = solutions.exclude(scores__model_version=model_version)
    return sorted(set(solutions.values_list("pk", flat=True)))


def read_items(solution_ids: Sequence[int]) -> tuple[list[int], list[list[int]], list[tuple[str, list[str]]]]:
    """(solution ids, step ids per solution, (problem, step texts) per solution) in two queries."""
    problems = dict(
        Solution.objects.filter(pk__in=solution_ids).values_list("pk", "problem__statement")
    )
    step_ids: dict[int, list[int]] = {pk: [] for pk in problems}
    texts: dict[int, list[str]] = {pk: [] for pk in problems}
    rows = Step.objects.filter(solution_id__in=problems).order_by("solution_id", "index")
    for solution_id, step_id, text in rows.values_list("solution_id", "pk", "text").iterator(chunk_size=2000):
        step_ids[solution_id].append(step_id)
        texts[solution_id].append(text)
    ordered = [pk for pk in sorted(problems) if texts[pk]]
    return ordered, [step_ids[pk] for pk in ordered], [(problems[pk], texts[pk]) for pk in ordered]


def write_scores(
    *, model_version: ModelVersion, solution_ids: Sequence[int], step_ids: Sequence[Sequence[int]], results
) -> int:
    """Insert step and solution scores; rows that already exist are left alone."""
    step_rows, solution_rows = [], []
    for solution_id, ids, steps in zip(solution_ids, step_ids, results):
        step_rows.extend(
            StepScore(step_id=step_id, model_version=model_version, p=s.p, mean=s.mean, sigma=s.sigma)
            for step_id, s in zip(ids, steps)
        )
        solution_rows.append(SolutionScore(solution_id=solution_id, model_version=model_version, **aggregate(steps)))
    with transaction.atomic():
        StepScore.objects.bulk_create(step_rows, ignore_conflicts=True, batch_size=2000)
        SolutionScore.objects.bulk_create(solution_rows, ignore_conflicts=True, batch_size=2000)
    return len(solution_rows)


def score_solutions(
    *, model_version: ModelVersion, solution_ids: Sequence[int], prm: LoadedPRM | RemotePRM | None = None
) -> int:
    """Score the given solutions that this version has not scored yet; returns how many."""
    todo = unscored_solution_ids(model_version=model_version, solution_ids=solution_ids)
    if not todo:
        return 0
    prm = prm or registry.load(model_version)
    ids, step_ids, items = read_items(todo)
    results = prm.step_probabilities(items)
    return write_scores(model_version=model_version, solution_ids=ids, step_ids=step_ids, results=results)


def score_texts(*, items: list[tuple[str, list[str]]], model_version: ModelVersion | None = None) -> list[list[dict]]:
    """Score texts that are not in the pool (the scoring API): per step {"p", "mean", "sigma", "spread"}
    (spread: the std of p over the version's ensemble members; None when it has no ensemble)."""
    version = model_version or registry.current_model_version()
    if version is None:
        raise LookupError("no current model version; run `manage.py init_default_model`")
    for index, (problem, steps) in enumerate(items):
        if not isinstance(problem, str) or not problem.strip():
            raise ValueError(f"item {index}: 'problem' must be a non-empty string")
        if not steps or not all(isinstance(s, str) and s.strip() for s in steps):
            raise ValueError(f"item {index}: 'steps' must be a non-empty list of non-empty strings")
    from scoring.rescoring import ensemble

    loaded = registry.load(version)
    # The version's stored ensemble (scoring/rescoring/ensemble.py), fitted at its last queue rebuild with labels.
    fitted = ensemble.stored_ensemble(version)
    if fitted is None:
        results = loaded.step_probabilities(items)
        spreads: list[list[float | None]] = [[None] * len(steps) for steps in results]
    else:
        results, spreads = ensemble.scored_with_spread(loaded, fitted, items)
    return [[{"p": s.p, "mean": s.mean, "sigma": s.sigma, "spread": spread} for s, spread in zip(steps, spread_row)]
            for steps, spread_row in zip(results, spreads)]


class ScoringUnavailable(RuntimeError):
    """No ml worker answered in time, or the model cannot be used: the API says 503."""


def score_on_worker(
    *, items: list[tuple[str, list[str]]], model_version: ModelVersion, timeout: float | None = None
) -> list[list[dict]]:
    """score_texts, computed by the ml worker: the web process waits at most `timeout` seconds.

    The model lives in the worker (loaded once, on the GPU where there is one), never in
    each web process. The message expires with the wait, so a worker that comes up late
    does not compute answers nobody is waiting for. Raises ValueError for bad items.
    """
    from scoring.tasks import score_texts_task

    timeout = settings.STEPWISE_SCORE_API_TIMEOUT if timeout is None else timeout
    answer = answer_from_worker(score_texts_task, (model_version.pk, [list(item) for item in items]),
                                timeout=timeout, what="scoring")
    return answer["steps"]


def answer_from_worker(task, args: tuple, *, timeout: float, what: str) -> dict:
    """Run `task` on the ml worker and wait at most `timeout` seconds for its answer.

    The task answers data: {"error", "status": 400} becomes ValueError, any other error
    ScoringUnavailable (the API's 503). The message expires with the wait, so a worker that
    comes up late does not compute answers nobody is waiting for.
    """
    from celery.exceptions import TimeoutError as CeleryTimeout

    result = task.apply_async(args=args, expires=timeout)
    try:
        answer = result.get(timeout=timeout, interval=0.02)
    except CeleryTimeout:
        raise ScoringUnavailable(
            f"no {what} worker answered within {timeout:g} s; is the ml worker running?"
        ) from None
    result.forget()  # Answered once, read once: no result left in the backend.
    if answer.get("status") == 400:
        raise ValueError(answer["error"])
    if "error" in answer:
        raise ScoringUnavailable(answer["error"])
    return answer


# --- rescore jobs -------------------------------------------------------------------------


def start_rescore(
    *, model_version: ModelVersion, created_by=None, rebuild_queue: bool = True
) -> RescoreJob:
    """Record a rescore job and enqueue it (after commit) on the ml queue.

    Nothing is loaded or hashed here, so the web process never imports torch: the worker
    verifies the model's files when it loads them, and a changed model fails the job.
    """
    from scoring.tasks import rescore_task

    job = RescoreJob.objects.create(model_version=model_version, created_by=created_by, rebuild_queue=rebuild_queue)
    rescore_task.delay_on_commit(job.pk)
    return job


def plan_chunks(*, job: RescoreJob, chunk_size: int | None = None) -> list[RescoreChunk]:
    """Split the unscored pool into chunks (once per job) and start the job.

    Returns the chunks not done, so a redelivered task re-dispatches only what is missing
    (a chunk a live worker is running is left to it by `claim_chunk`); a finished job gets none.
    """
    chunk_size = chunk_size or settings.STEPWISE_RESCORE_CHUNK_SIZE
    with job.failure_recorded(), transaction.atomic():
        # The lock makes planning happen once even if two deliveries race.
        RescoreJob.objects.select_for_update().filter(pk=job.pk).first()
        job.refresh_from_db()
        if job.state == JobState.PENDING:
            todo = unscored_solution_ids(model_version=job.model_version)
            RescoreChunk.objects.bulk_create(
                RescoreChunk(job=job, index=i, solution_ids=todo[start : start + chunk_size])
                for i, start in enumerate(range(0, len(todo), chunk_size))
            )
            job.start(total=len(todo), done=0, chunks_total=-(-len(todo) // chunk_size), chunks_done=0,
                      started_at=timezone.now())
        elif not job.start():
            return []
    return list(job.chunks.exclude(state=RescoreChunk.State.DONE))


def run_chunk(*, chunk_id: int) -> int:
    """Score one chunk (skipping what is already scored), record it done, finish the job if last.

    The worker holds the job (its heartbeat) while the chunk runs; a job that ended meanwhile
    (cancelled, failed) is left alone: nothing more is scored and the queue is not rebuilt.
    """
    chunk = RescoreChunk.objects.select_related("job__model_version").get(pk=chunk_id)
    job = chunk.job
    if chunk.state == RescoreChunk.State.DONE or not job.take_turn() or not claim_chunk(chunk):
        return 0
    try:
        scored, tokens = _score_chunk(model_version=job.model_version, solution_ids=chunk.solution_ids)
    except Exception as error:
        job.fail(f"chunk {chunk.index}: {type(error).__name__}: {error}")
        raise
    finally:
        heartbeats.release(chunk)
    RescoreChunk.objects.filter(pk=chunk.pk, state=RescoreChunk.State.RUNNING, claimed_by=chunk.claimed_by).update(
        state=RescoreChunk.State.DONE, finished_at=timezone.now(), tokens=tokens
    )
    refresh_progress(job=job)
    return scored


def claim_chunk(chunk: RescoreChunk) -> bool:
    """Claim a chunk for this process: pending -> running, or a running one whose holder is
    gone (heartbeat stale, process dead). One guarded UPDATE each, so of two workers handed
    the same chunk exactly one scores it; the claim is then beaten like a job's."""
    claim = {"claimed_by": this_worker(), "heartbeat_at": timezone.now()}
    rows = RescoreChunk.objects.filter(pk=chunk.pk)
    won = rows.filter(state=RescoreChunk.State.PENDING).update(state=RescoreChunk.State.RUNNING, **claim) == 1
    if not won:
        chunk.refresh_from_db()
        won = (
            chunk.state == RescoreChunk.State.RUNNING
            and holder_gone(chunk.claimed_by, chunk.heartbeat_at)
            # Compare and swap on the old holder: of two takeovers, one wins.
            and rows.filter(state=RescoreChunk.State.RUNNING, claimed_by=chunk.claimed_by,
                            heartbeat_at=chunk.heartbeat_at).update(**claim) == 1
        )
    if won:
        chunk.state, chunk.claimed_by, chunk.heartbeat_at = RescoreChunk.State.RUNNING, *claim.values()
        heartbeats.hold(chunk)
    return won


def _score_chunk(*, model_version: ModelVersion, solution_ids: Sequence[int]) -> tuple[int, int]:
    """score_solutions for a chunk, also counting the tokens the model read (for tokens/s)."""
    todo = unscored_solution_ids(model_version=model_version, solution_ids=solution_ids)
    if not todo:
        return 0, 0
    prm = registry.load(model_version)
    ids, step_ids, items = read_items(todo)
    results, tokens = prm.score_counting_tokens(items)
    scored = write_scores(model_version=model_version, solution_ids=ids, step_ids=step_ids, results=results)
    return scored, tokens


def refresh_progress(*, job: RescoreJob) -> None:
    """Progress from the chunk rows themselves, never a counter (a rerun cannot double count)."""
    done = list(job.chunks.filter(state=RescoreChunk.State.DONE).values_list("solution_ids", "tokens"))
    job.record_progress(done=sum(len(ids) for ids, _ in done), chunks_done=len(done),
                        tokens_done=sum(tokens for _, tokens in done))
    if len(done) >= job.chunks_total:
        finish(job=job)


def cancel_rescore(*, job: RescoreJob, user=None) -> bool:
    """Cancel an active rescore: chunks not started yet score nothing, the queue is not rebuilt."""
    return job.cancel(f"cancelled by {user}" if user else "cancelled")


def finish(*, job: RescoreJob) -> bool:
    """Rebuild the queue and succeed the job, exactly once; a failure here fails the job.

    The row lock and the guarded `succeed` make a late duplicate (the last two chunks
    finishing together, a redelivery) return False instead of starting a second generation.
    """
    from scoring.rescoring import selection

    with job.failure_recorded(), transaction.atomic():
        if not RescoreJob.objects.select_for_update().filter(pk=job.pk, state=JobState.RUNNING).exists():
            return False
        generation = selection.rebuild_queue(model_version=job.model_version) if job.rebuild_queue else None
        return job.succeed(generation=generation.number if generation else None)


def stalled_jobs(*, idle_seconds: float = 0) -> list[RescoreJob]:
    """Unfinished jobs with no chunk done for idle_seconds: a worker died under them, or the
    broker lost their messages. Dispatching their pending chunks again is safe (incremental)."""
    since = timezone.now() - timedelta(seconds=idle_seconds)
    jobs = RescoreJob.objects.filter(state__in=[JobState.PENDING, JobState.RUNNING], created_at__lte=since)
    busy = RescoreChunk.objects.filter(finished_at__gt=since).values("job_id")
    return list(jobs.exclude(pk__in=busy).select_related("model_version"))
