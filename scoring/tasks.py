"""Celery tasks of the model side, routed to the `ml` queue, and the answers a web request waits
for (score_texts_task, search_task) to the `score` queue (settings.CELERY_TASK_ROUTES).

Each takes ids and calls one function in scoring.rescoring.rescore; that module (and torch, through
the registry) is imported inside the task body so the web process never loads a model.
All are idempotent (keyed inserts, guarded updates), hence acks_late with
reject_on_worker_lost: a task lost with its worker child is put back at once, and a job
whose whole worker died is resent by the reconciler (jobs.recovery) when a worker starts.
"""
import logging
import time

from celery import shared_task
from celery.exceptions import Ignore, SoftTimeLimitExceeded
from django.conf import settings

logger = logging.getLogger(__name__)


@shared_task(acks_late=True, reject_on_worker_lost=True)
def rescore_task(job_id: int) -> int:
    """Plan a rescore job's chunks (once) and dispatch the ones not done yet; returns how many."""
    from scoring.models import RescoreJob  # with the task body (docstring)
    from scoring.rescoring import rescore as scoring  # the registry, torch on load: worker only (docstring)

    job = RescoreJob.objects.get(pk=job_id)
    pending = scoring.plan_chunks(job=job)
    if not pending:
        scoring.refresh_progress(job=RescoreJob.objects.get(pk=job_id))
    for chunk in pending:
        rescore_chunk_task.delay(job_id, chunk.pk)
    return len(pending)


@shared_task(acks_late=True, reject_on_worker_lost=True)
def rescore_chunk_task(job_id: int, chunk_id: int) -> int:
    """Score one chunk of a rescore job; a rerun of a done chunk writes nothing."""
    from scoring.rescoring import rescore as scoring  # the registry, torch on load: worker only (docstring)

    return scoring.run_chunk(chunk_id=chunk_id)


@shared_task(acks_late=True)
def resume_rescores_task(idle_seconds: float = 0) -> list[int]:
    """Re-dispatch the missing chunks of jobs idle that long (after a crash); safe to run any time."""
    from scoring.rescoring import rescore as scoring  # the registry, torch on load: worker only (docstring)

    job_ids = [job.pk for job in scoring.stalled_jobs(idle_seconds=idle_seconds)]
    for job_id in job_ids:
        rescore_task.delay(job_id)
    return job_ids


# The most seconds the score worker spends on one POST /api/score or /api/search: each message also
# carries its request's deadline and limits (scoring/on_worker.py), which end it sooner.
SCORE_SOFT_TIME_LIMIT = 60
SCORE_TIME_LIMIT = 75
SEARCH_SOFT_TIME_LIMIT = 180
SEARCH_TIME_LIMIT = 200
# Solutions scored between two looks at the deadline: a request given up on stops within one chunk.
SCORE_CHUNK_ITEMS = 8


class DeadlinePassed(Exception):
    """The request this task answers has stopped waiting: nothing more is computed for it."""


@shared_task(soft_time_limit=SCORE_SOFT_TIME_LIMIT, time_limit=SCORE_TIME_LIMIT)
def score_texts_task(model_version_id: int, items: list[list], deadline: float | None = None) -> dict:
    """Score texts for POST /api/score in the worker, where the model stays loaded.

    Returns {"steps": [...]} or {"error": ..., "status": 400 | 503} (see `_answer`); scores
    SCORE_CHUNK_ITEMS solutions at a time and stops at the first chunk that finds `deadline`
    (a Unix time) passed. Not acks_late: nobody waits for a redelivered answer.
    """
    from scoring.rescoring import rescore as scoring  # the registry, torch on load: worker only (docstring)

    def score_in_chunks(version) -> dict:
        steps: list[list[dict]] = []
        for start in range(0, len(items), SCORE_CHUNK_ITEMS):
            check_deadline(deadline, done=start, total=len(items))
            chunk = items[start:start + SCORE_CHUNK_ITEMS]
            steps += scoring.score_texts(items=[(p, s) for p, s in chunk], model_version=version)
        return {"steps": steps}

    return _answer(model_version_id, "scoring for /api/score", score_in_chunks, deadline=deadline)


@shared_task(soft_time_limit=SEARCH_SOFT_TIME_LIMIT, time_limit=SEARCH_TIME_LIMIT)
def search_task(model_version_id: int, body: dict, deadline: float | None = None) -> dict:
    """Run one PRM-guided search for POST /api/search in the worker (model and generator stay loaded).

    Answers data like score_texts_task; the message's soft time limit ends it at `deadline`. Not
    acks_late: nobody waits for a redelivered answer, and a search writes nothing, so a worker
    killed mid-search leaves nothing to repair.
    """
    from scoring.search import runs as searching  # torch: worker only (docstring)

    return _answer(model_version_id, "search for /api/search",
                   lambda version: searching.run_search(body=body, model_version=version), deadline=deadline)


def check_deadline(deadline: float | None, *, done: int, total: int) -> None:
    """Raise DeadlinePassed once `deadline` (a Unix time; None: no deadline) has passed."""
    if deadline is not None and time.time() >= deadline:
        raise DeadlinePassed(f"{done} of {total} solutions scored when the request's deadline passed")


def _answer(model_version_id: int, what: str, compute, *, deadline: float | None) -> dict:
    """`compute(version)`, with expected failures as data: {"error", "status": 400 | 503}.

    The web process never has to rebuild (import) a scoring exception, and answers 503,
    never 500, for what the worker could not do. Past the deadline nobody reads an answer: the
    task logs that it stopped ("abandoned", counted by tests and operators) and stores none (Ignore).
    """
    from scoring.models import ModelVersion  # with the task body (docstring)
    from scoring.store import registry  # torch on load: worker only (docstring)

    try:
        check_deadline(deadline, done=0, total=1)
        version = ModelVersion.objects.filter(pk=model_version_id).first()
        if version is None:
            return {"error": f"model version {model_version_id} no longer exists", "status": 503}
        return compute(version)
    except registry.ModelIntegrityError as error:
        return {"error": str(error), "status": 503}
    except ValueError as error:
        return {"error": str(error), "status": 400}
    except (DeadlinePassed, SoftTimeLimitExceeded) as error:
        logger.info("%s abandoned: %s", what, error or "its soft time limit (the deadline) passed")
        raise Ignore() from None
    except Exception as error:  # a hard limit, out of memory: the caller answers 503, never 500
        logger.exception("%s failed", what)
        return {"error": f"{what.split()[0]} failed: {type(error).__name__}: {error}", "status": 503}


# --- retraining (scoring/learning/retraining.py) ------------------------------------------------------


@shared_task(acks_late=True, reject_on_worker_lost=True)
def train_prm_task(run_id: int) -> str:
    """Run one pending training run; a redelivered task finds it claimed and does nothing."""
    from scoring.learning import retraining  # training loads torch: worker only (docstring)

    return retraining.run_training(run_id=run_id).state


@shared_task
def scheduled_retrain_task(min_new_labels: int = 50, options: dict | None = None,
                           project_id: int | None = None) -> int | None:
    """Beat's entry: start a run in the project when enough of its labels are new; returns the run
    id or None. Without a project (the site's schedule) it sends one task per project that has no
    schedule of its own (`retraining.projects_on_the_shared_schedule`)."""
    from annotate.models import Project  # with the task body (docstring)
    from scoring.learning import retraining  # training loads torch: worker only (docstring)

    if project_id is None:  # the site's schedule
        for pk in retraining.projects_on_the_shared_schedule():
            scheduled_retrain_task.delay(min_new_labels=min_new_labels, options=options, project_id=pk)
        return None
    project = Project.objects.filter(pk=project_id).first()
    if project is None:  # deleted since the schedule was made
        return None
    run = retraining.scheduled_retrain(project=project, min_new_labels=min_new_labels, options=options)
    return run.pk if run else None


@shared_task(acks_late=True, reject_on_worker_lost=True)
def export_model_task(model_version_id: int, as_kind: str) -> str:
    """Build a version's checkpoint archive for the models page; a rerun finds it built."""
    from scoring.models import ModelVersion  # with the task body (docstring)
    from scoring.store import model_exports  # the export loads torch: worker only (docstring)

    version = ModelVersion.objects.get(pk=model_version_id)
    return str(model_exports.build_archive(version=version, as_kind=as_kind))


# --- generation runs (scoring/generation/runs.py) -------------------------------------------------


@shared_task(acks_late=True, reject_on_worker_lost=True)
def generate_solutions_task(run_id: int) -> str:
    """Run or resume a generation run; a redelivery finds it held or finished and does nothing."""
    from scoring.generation import runs as generation  # the generator (torch): a worker only

    # Half the soft limit: the chunk that passes the budget still has the other half to finish.
    budget = settings.CELERY_TASK_SOFT_TIME_LIMIT / 2
    return generation.run_generation(run_id=run_id, time_budget=budget).state


# --- automatic step labels by rollouts (scoring/generation/rollout_labeling.py) --------------------------------


@shared_task(acks_late=True, reject_on_worker_lost=True)
def label_rollouts_task(job_id: int) -> str:
    """Label one chunk of a rollout job's solutions; a rerun skips the solutions already labeled."""
    from scoring.generation import rollout_labeling  # the generator, torch: worker only (docstring)

    return rollout_labeling.run_rollout_job(job_id=job_id).state


# --- judge labels (scoring/generation/judge_labeling.py) ------------------------------------------------------


@shared_task(acks_late=True, reject_on_worker_lost=True)
def label_judge_task(job_id: int) -> str:
    """Ask the judge about one chunk of a judge job's solutions; a rerun skips those already answered."""
    from scoring.generation import judge_labeling  # a local judge loads torch: worker only (docstring)

    return judge_labeling.run_judge_job(job_id=job_id).state
