"""Generation runs: N samples per problem from a policy model, into the pool with provenance.

A run (`GenerationRun`) is planned once into chunks of problems. Each chunk is generated
outside any transaction, then written in one: its solutions through the importer's own
writer (`annotate.pool.importing.write_batch`: steps found by content hash, answers graded,
every sample a `SampleLine` keyed on the run's digest and the sample's number, so
duplicates are counted in `sample_count` and never twice), queued like an import, and the
chunk marked done. A worker killed anywhere leaves each chunk wholly written or not at all;
the run's task, resent by the reconciler (`jobs.recovery`), takes the run over
(`Job.start`) and generates only the chunks still pending: no duplicate, no gap.

Provenance is in every solution: `Solution.generator` (the generator's name) and
`Solution.meta["generation"]` (run, generator spec, sampling parameters with the chunk's
seed, prompt template, the sample's tokens and finish reason).
"""
from __future__ import annotations

import hashlib
import json
import time

from django.db import transaction
from django.utils import timezone

from annotate.labeling import queueing
from annotate.models import Problem, Project
from annotate.pool.importing import Record, SourceFile, write_batch
from annotate.pool.importing.formats import check_size
from annotate.pool.prm800k import LineError
from jobs.models import claim
from jobs.states import JobState
from scoring.generation.backends import generator_from_spec
from scoring.generation.generators import (
    DEFAULT_PROMPT_TEMPLATE,
    Generator,
    Sample,
    SamplingParams,
    check_spec,
    render_prompt,
)
from scoring.models import GenerationChunk, GenerationRun
from steps.answers import extract_answer
from steps.splitting import check_mode, split_steps

SOURCE = "generated"
FILTER_FIELDS = {"problem_ids", "source", "split", "limit"}
SUM_FIELDS = ("created", "duplicates", "skipped", "queued", "prompt_tokens", "completion_tokens", "retries")
_generators: dict[str, Generator] = {}  # loaded once per worker process, by spec


def start_generation_run(
    *, project: Project | None = None, problem_filter: dict, samples_per_problem: int, generator_spec: dict,
    sampling: dict | None = None,
    prompt_template: str = DEFAULT_PROMPT_TEMPLATE, seed: int | None = None, split_mode: str = "blank_line",
    chunk_size: int = 8, created_by=None, enqueue: bool = True,
) -> GenerationRun:
    """Check everything a worker will need, record the run in the project (its problems are the
    project's, and so are the solutions it writes), and (after commit) send its task.

    A ValueError names the field at fault; nothing is recorded then.
    """
    project = Project.objects.given(project)
    sampling = dict(sampling or {})
    sampling.pop("n", None)
    sampling_params(sampling, n=samples_per_problem, seed=seed)  # raises on a bad field
    render_prompt(prompt_template, "")
    if chunk_size < 1:
        raise ValueError(f"chunk_size: must be at least 1, not {chunk_size}")
    if not select_problems(problem_filter, project=project):
        raise ValueError(f"problem_filter: matches no problem in {project.slug}")
    run = GenerationRun.objects.create(
        project=project, problem_filter=problem_filter, samples_per_problem=samples_per_problem,
        generator_spec=check_spec(generator_spec), sampling=sampling, prompt_template=prompt_template,
        split_mode=check_mode(split_mode), seed=seed, chunk_size=chunk_size, created_by=created_by,
    )
    if enqueue:
        transaction.on_commit(run.send_task)
    return run


def select_problems(problem_filter: dict, *, project: Project) -> list[int]:
    """The project's problem ids, in id order: the listed ones, or those of a source / split (up to `limit`)."""
    if not isinstance(problem_filter, dict):
        raise ValueError("problem_filter: must be an object")
    unknown = sorted(set(problem_filter) - FILTER_FIELDS)
    if unknown:
        raise ValueError(f"problem_filter.{unknown[0]}: unknown (expected {', '.join(sorted(FILTER_FIELDS))})")
    problems = Problem.objects.filter(project=project).order_by("pk")
    if "problem_ids" in problem_filter:
        wanted = [int(pk) for pk in problem_filter["problem_ids"]]
        found = set(problems.filter(pk__in=wanted).values_list("pk", flat=True))
        missing = [pk for pk in wanted if pk not in found]
        if missing:
            raise ValueError(f"problem_filter.problem_ids: no problem {missing[0]}")
        return list(dict.fromkeys(wanted))
    for field in ("source", "split"):
        if problem_filter.get(field):
            problems = problems.filter(**{field: problem_filter[field]})
    ids = problems.values_list("pk", flat=True)
    limit = problem_filter.get("limit")
    return list(ids[: int(limit)] if limit else ids)


def sampling_params(sampling: dict, *, n: int, seed: int | None) -> SamplingParams:
    fields = {**sampling, "stop": tuple(sampling.get("stop") or ())}
    try:
        return SamplingParams(**fields, n=n, seed=seed)
    except TypeError as error:  # an unknown field
        raise ValueError(f"sampling: {error}") from None


def run_digest(run: GenerationRun) -> str:
    """The samples' key in SampleLine, as a file's digest is for an import: one per run."""
    return hashlib.sha256(f"stepwise generation run {run.pk}".encode()).hexdigest()


def run_generation(*, run_id: int, time_budget: float | None = None) -> GenerationRun:
    """Run (or resume) a generation run; a finished one, or one another live worker holds, is
    left alone. Any error fails the run with its message.

    With `time_budget` (seconds; the task passes half its soft time limit), a long run hands
    itself on after the chunk that passes it: back to pending and its task sent again, so
    no task outlives its time limit and a redelivery never has hours to redo.
    """
    run = GenerationRun.objects.select_related("project").get(pk=run_id)
    if not plan_chunks(run=run):
        return run
    started = time.monotonic()
    with run.failure_recorded():
        generator = generator_for(run.generator_spec)
        run.record_progress(generator_name=generator.name[:100])
        for chunk in run.chunks.filter(state=GenerationChunk.State.PENDING).order_by("index"):
            if not run.take_turn():
                break  # cancelled or failed meanwhile: generate nothing more
            generate_chunk(run=run, chunk=chunk, generator=generator)
            refresh_progress(run=run)
            if time_budget is not None and time.monotonic() - started > time_budget:
                hand_on(run=run)
                break
        else:
            # Also when no chunk was left: an attempt killed after its last chunk, before the end.
            refresh_progress(run=run)
    run.refresh_from_db()
    return run


def hand_on(*, run: GenerationRun) -> None:
    """Give a running run back (pending) and send its task again, unless it just ended."""
    run.refresh_from_db()
    if run.state == JobState.RUNNING and run.release():
        run.mark_enqueued()
        transaction.on_commit(run.send_task)


def plan_chunks(*, run: GenerationRun) -> bool:
    """Cut a pending run into chunks (once) and claim it; True when this process should work on it."""
    with run.failure_recorded(), transaction.atomic():
        # The lock makes planning happen once even if two deliveries race.
        GenerationRun.objects.select_for_update().filter(pk=run.pk).first()
        run.refresh_from_db()
        if run.state != JobState.PENDING or run.chunks.exists():  # running, finished, or handed on
            return run.start()
        ids, size = select_problems(run.problem_filter, project=run.project), run.chunk_size
        GenerationChunk.objects.bulk_create(
            GenerationChunk(run=run, index=i, problem_ids=ids[start : start + size])
            for i, start in enumerate(range(0, len(ids), size))
        )
        return run.start(problem_ids=ids, total=len(ids), done=0, chunks_total=-(-len(ids) // size))


def generator_for(spec: dict) -> Generator:
    key = json.dumps(spec, sort_keys=True)
    if key not in _generators:
        _generators[key] = generator_from_spec(spec)
    return _generators[key]


def generate_chunk(*, run: GenerationRun, chunk: GenerationChunk, generator: Generator) -> None:
    """Generate one chunk's samples, then write them and mark the chunk done in one transaction."""
    problems = Problem.objects.filter(project=run.project_id).in_bulk(chunk.problem_ids)
    present = [pk for pk in chunk.problem_ids if pk in problems]  # a problem deleted since planning is left out
    params = sampling_params(run.sampling, n=run.samples_per_problem,
                             seed=None if run.seed is None else run.seed + chunk.index)
    retries_before = generator.usage.retries
    rows = generator.generate([render_prompt(run.prompt_template, problems[pk].statement) for pk in present], params)
    samples = [(problems[pk], j, sample) for pk, row in zip(present, rows) for j, sample in enumerate(row)]
    records = [record_for(run=run, chunk=chunk, problem=p, sample_no=j, sample=s, params=params,
                          generator=generator) for p, j, s in samples]
    counts = {
        "skipped": sum(record is None for record in records),
        "prompt_tokens": sum(s.prompt_tokens for _, j, s in samples if j == 0),  # a prompt is read once
        "completion_tokens": sum(s.completion_tokens for _, _, s in samples),
        "retries": generator.usage.retries - retries_before,
    }
    with transaction.atomic():
        chunk_row = GenerationChunk.objects.filter(pk=chunk.pk)
        # Claimed as done first: the row stays locked until the solutions are written (or rolled back).
        if not claim(chunk_row, to=GenerationChunk.State.DONE, finished_at=timezone.now()):
            return  # another attempt wrote it meanwhile
        outcomes = write_batch([r for r in records if r is not None], project=run.project,
                               source_file=SourceFile(digest=run_digest(run), name=str(run)))
        failed = [o for o in outcomes if o.status == "error"]
        if failed:
            raise ValueError(f"chunk {chunk.index}, sample line {failed[0].line_no}: {failed[0].error}")
        # (A created outcome always names its solution: `is not None` is for the type checker.)
        created = [o.solution for o in outcomes if o.status == "created" and o.solution is not None]
        chunk_row.update(created=len(created), duplicates=len(outcomes) - len(created),
                         queued=queueing.enqueue_imported(project=run.project, solution_ids=created), **counts)


def record_for(*, run: GenerationRun, chunk: GenerationChunk, problem: Problem, sample_no: int, sample: Sample,
               params: SamplingParams, generator: Generator) -> Record | None:
    """One sample as the importer's Record (None when it has no step or is over the size limits).

    Its line number is its place in the run (problem position x N + sample), the SampleLine key.
    """
    position = chunk.index * run.chunk_size + chunk.problem_ids.index(problem.pk)
    text = sample.text.replace("\x00", "")  # PostgreSQL text cannot hold NUL; a byte-level model can write it
    record = Record(
        line_no=position * run.samples_per_problem + sample_no + 1, statement=problem.statement,
        ground_truth_answer=problem.ground_truth_answer, ground_truth_solution=problem.ground_truth_solution,
        steps=split_steps(text, run.split_mode), final_answer=extract_answer(text), source=SOURCE,
        split=problem.split, generator=generator.name[:100], meta={"generation": {
            "run": run.pk, "generator": generator.name, "spec": run.generator_spec, "sampling": params.as_dict(),
            "prompt_template": run.prompt_template, "sample": sample_no, "prompt_tokens": sample.prompt_tokens,
            "completion_tokens": sample.completion_tokens, "finish_reason": sample.finish_reason,
        }},
    )
    # The problem as stored, whatever its statement would hash to now: the sample belongs to it.
    record.__dict__["problem_hash"] = problem.content_hash
    if not record.steps:
        return None
    try:
        check_size(record)
    except LineError:
        return None
    return record


def refresh_progress(*, run: GenerationRun) -> None:
    """Totals from the done chunks' rows, never a counter; succeed the run after its last chunk."""
    done = list(run.chunks.filter(state=GenerationChunk.State.DONE).values("problem_ids", *SUM_FIELDS))
    totals = {field: sum(row[field] for row in done) for field in SUM_FIELDS}
    run.record_progress(done=sum(len(row["problem_ids"]) for row in done), chunks_done=len(done), **totals)
    if len(done) >= run.chunks_total:
        run.succeed()


def cancel_generation_run(*, run: GenerationRun, user=None) -> bool:
    """Cancel an active run: the chunk being generated is still written, no later one is."""
    return run.cancel(f"cancelled by {user}" if user else "cancelled")
