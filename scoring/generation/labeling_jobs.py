"""What every automatic-labeling job shares (rollouts, a judge): its generator and its chunk loop.

- The generator spec as a command or a form gives it (`spec_from_option`), checked and resolved
  (`resolve_spec`: a local spec without a model names the default backbone, so a run's provenance
  says which folder labeled it) and described in a run's `source` (`describe_spec`).
- The solutions a job is given: those asked for that are eligible, up to a limit (`choose_solutions`).
- The generator loaded once per worker process, by spec (`load_generator`), and the run's
  sampling parameters seeded per solution (`solution_params`).
- The chunk loop (`run_labeling_job`, `work_in_chunks`): a task works for at most `CHUNK_SECONDS`, gives the job back to
  pending and sends itself again, so no task runs for an hour and a crash loses one solution's work.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from django.db.models import QuerySet

from annotate.models import AutoLabelRun, Solution
from jobs.models import Job
from jobs.states import JobState
from scoring.generation.backends import generator_from_spec
from scoring.generation.generators import Generator, SamplingParams, check_spec, default_generator_folder

CHUNK_SECONDS = 240.0
DEFAULT_SPEC = {"backend": "local"}  # no model: the default SmolLM2 backbone
# Loaded once per worker process, by spec: a model is never loaded twice in one worker.
_generators: dict[str, Generator] = {}

J = TypeVar("J", bound=Job)
T = TypeVar("T")


def spec_from_option(value: str) -> dict:
    """`--generator`: 'default', a JSON spec, or a local model folder; a ValueError names bad JSON."""
    if value == "default":
        return dict(DEFAULT_SPEC)
    if value.lstrip().startswith("{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(f"--generator: not valid JSON: {error}") from None
    return {"backend": "local", "model": value}


def solution_ids_option(value: str) -> list[int] | None:
    """`--solution-ids`: comma-separated ids (None when empty); a ValueError names the bad text."""
    try:
        ids = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--solution-ids {value!r}: expected comma-separated ids") from None
    return ids or None


def labelable_solutions(*, project):
    """The project's solutions a machine source may label: with steps; not references or gold items
    (those are people's to judge). Rollouts narrow it to known answers; a judge takes it as is."""
    return Solution.objects.with_steps().filter(project=project, is_reference=False, is_gold=False)


def choose_solutions(eligible: QuerySet, *, solution_ids=None, limit: int | None = None) -> tuple[list[int], int]:
    """The ids a job labels, of `eligible` (ordered) those asked for (all when None), at most `limit`;
    and how many asked for were skipped (not eligible, or past the limit)."""
    wanted = None if solution_ids is None else list(dict.fromkeys(int(i) for i in solution_ids))
    if wanted is not None:
        eligible = eligible.filter(pk__in=wanted)
    ids = eligible.values_list("pk", flat=True)
    chosen = list(ids[:limit] if limit else ids)
    return chosen, len(wanted or chosen) - len(chosen)


def resolve_spec(spec: dict | None) -> dict:
    """The spec checked (`generators.check_spec`), a local one without a model naming the default
    backbone's folder (built where the generator is loaded, `backends.generator_from_spec`: a page or
    the API starts jobs too)."""
    spec = check_spec(dict(spec or DEFAULT_SPEC))
    if spec["backend"] == "local" and not spec.get("model"):
        spec["model"] = str(default_generator_folder(build=False))
    return spec


def describe_spec(spec: dict) -> str:
    """A run's `source`: `local:FOLDER-NAME` or `openai:BASE_URL/MODEL`."""
    if spec.get("backend", "local") == "local":
        return f"local:{Path(spec.get('model') or '').name}"
    return f"openai:{spec.get('base_url', '')}/{spec.get('model', '')}"


def load_generator(spec: dict) -> Generator:
    key = repr(sorted(spec.items()))
    if key not in _generators:
        _generators[key] = generator_from_spec(spec)
    return _generators[key]


def solution_params(run: AutoLabelRun, solution: Solution) -> SamplingParams:
    """The run's sampling parameters, seeded per solution: a resumed run samples what it would have."""
    sampling = dict(run.params["sampling"])
    if sampling.get("seed") is not None:
        sampling["seed"] = int(sampling["seed"]) + solution.pk
    return SamplingParams(**{**sampling, "stop": tuple(sampling.get("stop", ()))})


def run_labeling_job(job: J, *, todo: Callable[[], Iterable[T]], work: Callable[[T, Generator], object],
                     done: Callable[[], int], chunk_seconds: float = CHUNK_SECONDS, resend: bool = True) -> J:
    """Start the job (a no-op for one finished or held elsewhere), load its generator (`generator_spec`)
    and `work` on `todo` in chunks (`work_in_chunks`); a failure ends the job failed, with its message."""
    if not job.start():
        return job
    with job.failure_recorded():
        generator = load_generator(job.generator_spec)  # type: ignore[attr-defined]  # every labeling job has one
        return work_in_chunks(job, todo=todo(), work=lambda item: work(item, generator), done=done,
                              chunk_seconds=chunk_seconds, resend=resend)
    return job


def run_here(run_job: Callable[..., Job], *, job_id: int) -> None:
    """Run a labeling job in this process to its end, chunk after chunk (a command's --inline)."""
    while run_job(job_id=job_id, resend=False).state == "pending":
        pass  # the chunk's time ran out: go on with the next chunk here


def work_in_chunks(job: J, *, todo: Iterable[T], work: Callable[[T], object], done: Callable[[], int],
                   chunk_seconds: float, resend: bool) -> J:
    """`work` on each of `todo` for about `chunk_seconds`, the job's progress recorded after each.

    Call it on a job this process has started, inside `job.failure_recorded()`. Returns the job:
    succeeded when nothing is left, or pending again when the chunk's time ran out first (one item
    at least is worked per chunk), its task sent again unless `resend` is False (the caller goes on
    in-process); a job cancelled meanwhile stops after the item in hand.
    """
    started = time.monotonic()
    for item in todo:
        work(item)
        count = done()
        job.record_progress(done=count)
        if not type(job).objects.filter(pk=job.pk, state=JobState.RUNNING).exists():
            job.refresh_from_db()  # cancelled (or ended elsewhere): what is stored stays, nothing more is asked
            return job
        if time.monotonic() - started > chunk_seconds and count < job.total:
            return continue_later(job, resend=resend)
    job.succeed(done=done())
    return job


def continue_later(job: J, *, resend: bool) -> J:
    if job.release() and resend:  # back to pending: the next chunk's task claims it like a new job
        job.mark_enqueued()
        job.send_task()
    job.refresh_from_db()
    return job
