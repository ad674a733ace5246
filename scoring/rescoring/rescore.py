"""Rescoring the pool: database read -> tokenize -> forward -> database write, in chunks.

Every write is keyed (one score per step and model version, one per solution and version)
and inserted with ignore_conflicts, so a chunk that runs twice writes nothing twice. Solutions
already scored by a version are skipped before anything is tokenized: an unchanged pool with
the same model costs no forward pass at all.

Within a chunk the model is kept busy (`score_chunk`): one background thread reads and
tokenizes the next batches and writes the scored ones, while the chunk's thread only runs
the forward passes.
"""
from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, cast

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.utils import timezone

from annotate.models import Project
from jobs.holders import heartbeats
from jobs.states import ACTIVE_STATES, JobState
from scoring.models import ModelVersion, RescoreChunk, RescoreJob
from scoring.rescoring import scores, selection
from scoring.store import registry

if TYPE_CHECKING:
    from scoring.core.encoding import Encoded
    from scoring.core.prm import LoadedPRM
    from scoring.store.remote_scorer import RemotePRM


def score_texts(*, items: list[tuple[str, list[str]]], model_version: ModelVersion) -> list[list[dict]]:
    """Score texts that are not in the pool (the scoring API): per step {"p", "mean", "sigma", "spread"}
    (spread: the std of p over the version's ensemble members; None when it has no ensemble)."""
    for index, (problem, steps) in enumerate(items):
        if not isinstance(problem, str) or not problem.strip():
            raise ValueError(f"item {index}: 'problem' must be a non-empty string")
        if not steps or not all(isinstance(s, str) and s.strip() for s in steps):
            raise ValueError(f"item {index}: 'steps' must be a non-empty list of non-empty strings")
    from scoring.rescoring import ensemble  # torch: /api/score runs this on the worker, never in the web process

    loaded = registry.load(model_version)
    # The version's stored ensemble (scoring/rescoring/ensemble.py), fitted at its last queue rebuild with labels.
    fitted = ensemble.stored_ensemble(model_version)
    if fitted is None:
        results = loaded.step_probabilities(items)
        spreads: Sequence[Sequence[float | None]] = [[None] * len(steps) for steps in results]
    else:
        results, spreads = ensemble.scored_with_spread(loaded, fitted, items)
    return [[{"p": s.p, "mean": s.mean, "sigma": s.sigma, "spread": spread} for s, spread in zip(steps, spread_row)]
            for steps, spread_row in zip(results, spreads)]


# --- rescore jobs -------------------------------------------------------------------------


def start_rescore(
    *, model_version: ModelVersion, project: Project | None = None, created_by=None, rebuild_queue: bool = True
) -> RescoreJob:
    """Record a rescore of the project's pool and enqueue it (after commit) on the ml queue; its
    queue rebuild fills the project's queue.

    Nothing is loaded or hashed here, so the web process never imports torch: the worker
    verifies the model's files when it loads them, and a changed model fails the job.
    """
    project = Project.objects.given(project)
    job = RescoreJob.objects.create(model_version=model_version, project=project, created_by=created_by,
                                    rebuild_queue=rebuild_queue)
    transaction.on_commit(job.send_task)
    return job


def rescore_at_start(*, project: Project) -> RescoreJob | None:
    """The start script's rescore of the project's pool with its current model: the rescore of that
    model already under way, else a new one. None without a current model, and None while the
    project's last rescore stands cancelled: a cancel lasts until someone starts a rescore, not
    until the next restart."""
    model = registry.current_model(project)
    if model is None:
        return None
    last = RescoreJob.objects.filter(project=project).order_by("-pk").first()
    if last is not None and last.state == JobState.CANCELLED:
        return None
    if last is not None and last.state in ACTIVE_STATES and last.model_version_id == model.pk:
        return last
    return start_rescore(model_version=model, project=project)


def plan_chunks(*, job: RescoreJob, chunk_size: int | None = None) -> list[RescoreChunk]:
    """Split the unscored pool into chunks (once per job) and start the job.

    Returns the chunks not done, so a redelivered task re-dispatches only what is missing
    (a chunk a live worker is running is left to it by its claim, `Held.claim`); a finished job gets none.
    """
    chunk_size = chunk_size or settings.STEPWISE_RESCORE_CHUNK_SIZE
    with job.failure_recorded(), transaction.atomic():
        # The lock makes planning happen once even if two deliveries race.
        RescoreJob.objects.select_for_update().filter(pk=job.pk).first()
        job.refresh_from_db()
        if job.state == JobState.PENDING:
            todo = scores.unscored_solution_ids(model_version=job.model_version, project=job.project)
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
    chunk = RescoreChunk.objects.select_related("job__model_version", "job__project").get(pk=chunk_id)
    job = chunk.job
    if chunk.state == RescoreChunk.State.DONE or not job.take_turn() or not chunk.claim():
        return 0
    try:
        scored, tokens = score_chunk(model_version=job.model_version, solution_ids=chunk.solution_ids)
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


# --- the chunk pipeline -------------------------------------------------------------------

PIPELINE_BATCH = 16  # solutions per forward step of the pipeline, its forward off the CPU
# A forward on one CPU thread beside other workers' (OMP_NUM_THREADS=1, as scaling out on CPUs runs)
# takes larger batches: each forward call, and each batch's read and write, has a cost of its own,
# paid on the cores the others use. Tiny model, two processes of one thread each on two cores,
# chunks of 64, 4 alternating pairs: 3.47-3.55 ms of CPU per solution against 3.60-3.73 in batches
# of 16, 493-513 solutions/s against 477-495.
SHARED_CPU_BATCH = 64
PREFETCH = 2  # batches read and tokenized ahead of the forward


@dataclass
class _Batch:
    solution_ids: list[int]
    step_ids: list[list[int]]
    items: list[tuple[str, list[str]]]
    encoded: list[Encoded] | None  # None: the scorer tokenizes itself (a remote one)


def score_chunk(*, model_version: ModelVersion, solution_ids: Sequence[int], prm: LoadedPRM | RemotePRM | None = None,
                batch_size: int | None = None) -> tuple[int, int]:
    """Score the solutions this version has not scored yet: (solutions written, tokens the model read).

    Batches are read and tokenized ahead and written behind on one background thread, so the
    forward passes run back to back; an error there fails the chunk here, and the thread is gone
    when this returns.
    """
    todo = scores.unscored_solution_ids(model_version=model_version, solution_ids=solution_ids)
    if not todo:
        return 0, 0
    prm = prm or registry.load(model_version)
    size = batch_size or _pipeline_batch(prm)
    batches = pipeline_batches(todo, size) if size else [todo]
    scored = tokens = 0
    with _io_thread() as io:
        ready = deque(io.submit(_read_batch, ids, prm) for ids in batches[:PREFETCH])
        waiting = iter(batches[PREFETCH:])
        writes: deque[Future[int]] = deque()
        while ready:
            batch = ready.popleft().result()  # raises what the read or the tokenizer raised
            if (more := next(waiting, None)) is not None:
                ready.append(io.submit(_read_batch, more, prm))
            results, counted = _forward(batch, prm)
            tokens += counted
            writes.append(io.submit(scores.write_scores, model_version=model_version, solution_ids=batch.solution_ids,
                                    step_ids=batch.step_ids, results=results))
            while writes and writes[0].done():
                scored += writes.popleft().result()  # a failed write stops the chunk at the next batch
        scored += sum(write.result() for write in writes)
    return scored, tokens


def pipeline_batches(solution_ids: list[int], size: int) -> list[list[int]]:
    """The chunk in batches of `size`, but its first and last a quarter of that: the first read and
    the last write have no forward beside them, so the model waits for them (tiny model, chunks of
    64, forward off the CPU as on a GPU: e2e/bare 0.925-0.93 against 0.89-0.91 at full batches)."""
    end = max(1, size // 4)
    if len(solution_ids) <= 2 * end:
        return [solution_ids]
    body = solution_ids[end:-end]
    return [solution_ids[:end], *(body[start : start + size] for start in range(0, len(body), size)),
            solution_ids[-end:]]


def _pipeline_batch(prm: LoadedPRM | RemotePRM) -> int | None:
    """Solutions per pipeline batch for this scorer; None: the chunk in one batch, not pipelined.

    A forward on the CPU with a thread per core keeps every core busy: reading and tokenizing
    beside it only took cores from it (tiny model, 2 cores: e2e/bare 0.63-0.68 overlapped, 0.73-0.77
    in one batch per chunk), so there a chunk is one batch. A GPU's or a remote scorer's forward
    leaves the CPU free, and so does one on fewer threads than cores (SHARED_CPU_BATCH)."""
    device = getattr(prm, "device", None)
    if device is None or device.type != "cpu":
        return PIPELINE_BATCH
    import torch  # a local model is loaded, so torch already is

    return None if torch.get_num_threads() >= len(os.sched_getaffinity(0)) else SHARED_CPU_BATCH


def _read_batch(solution_ids: list[int], prm: LoadedPRM | RemotePRM) -> _Batch:
    ids, step_ids, items = scores.read_items(solution_ids)
    encode = getattr(prm, "encode_many", None)  # a local model; a remote scorer tokenizes on its server
    return _Batch(ids, step_ids, items, encode(items) if encode else None)


def _forward(batch: _Batch, prm: LoadedPRM | RemotePRM) -> tuple[list, int]:
    if batch.encoded is None:
        results, tokens = prm.score_counting_tokens(batch.items)
        return results, tokens
    local = cast("LoadedPRM", prm)  # it tokenized the batch in _read_batch
    return local.probabilities_for_encoded(batch.encoded), local.count_tokens(batch.encoded)


@contextmanager
def _io_thread() -> Iterator[ThreadPoolExecutor]:
    """One worker thread on this thread's database connection (as Django's live server test
    thread shares it): it sees what this transaction sees, opens no connection of its own, and
    never runs a query beside this thread, which only runs the model meanwhile."""
    shared = connections[DEFAULT_DB_ALIAS]
    shared.inc_thread_sharing()
    io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rescore-io",
                            initializer=connections.__setitem__, initargs=(DEFAULT_DB_ALIAS, shared))
    try:
        yield io
    finally:
        io.shutdown(wait=True, cancel_futures=True)  # a failed chunk leaves no read running behind it
        shared.dec_thread_sharing()


def refresh_progress(*, job: RescoreJob) -> None:
    """Progress from the chunk rows themselves, never a counter (a rerun cannot double count)."""
    progress = job.chunks.progress()
    job.record_progress(**progress)
    if progress["chunks_done"] >= job.chunks_total:
        finish(job=job)


def cancel_rescore(*, job: RescoreJob, user=None) -> bool:
    """Cancel an active rescore: chunks not started yet score nothing, the queue is not rebuilt."""
    return job.cancel(f"cancelled by {user}" if user else "cancelled")


def finish(*, job: RescoreJob) -> bool:
    """Rebuild the queue and succeed the job, exactly once; a failure here fails the job.

    The row lock and the guarded `succeed` make a late duplicate (the last two chunks
    finishing together, a redelivery) return False instead of starting a second generation.
    """
    with job.failure_recorded(), transaction.atomic():
        if not RescoreJob.objects.select_for_update().filter(pk=job.pk, state=JobState.RUNNING).exists():
            return False
        generation = (selection.rebuild_queue(model_version=job.model_version, project=job.project)
                      if job.rebuild_queue else None)
        return job.succeed(generation=generation.number if generation else None)


def stalled_jobs(*, idle_seconds: float = 0) -> list[RescoreJob]:
    """Unfinished jobs with no chunk done for idle_seconds: a worker died under them, or the
    broker lost their messages. Dispatching their pending chunks again is safe (incremental)."""
    since = timezone.now() - timedelta(seconds=idle_seconds)
    jobs = RescoreJob.objects.filter(state__in=[JobState.PENDING, JobState.RUNNING], created_at__lte=since)
    busy = RescoreChunk.objects.filter(finished_at__gt=since).values("job_id")
    return list(jobs.exclude(pk__in=busy).select_related("model_version", "project"))
