"""The Celery app, set up as Celery's Django guide shows."""
import os

from celery import Celery
from celery.signals import task_postrun, task_prerun, worker_process_init, worker_ready
from django.db import close_old_connections, connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Workers log to files: no tqdm bars from model loading. No tokenizer threads in the main process,
# which forks the pool processes (a child forked after they ran inherits a pool it cannot use).
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

app = Celery("stepwise")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def reconcile_jobs_at_start(**_) -> None:
    """A starting worker resends the tasks of jobs a dead worker held or a lost broker dropped,
    so a killed worker's job resumes within seconds of the restart, beat or no beat."""
    from jobs import recovery  # Django models: config/__init__ imports this before the app registry is ready

    try:
        recovery.reconcile(pending_after=0)
    finally:
        connections.close_all()  # the main process keeps no connection its children could share


@worker_process_init.connect
def tokenizer_threads_in_pool_process(**_) -> None:
    allow_tokenizer_threads()


def allow_tokenizer_threads() -> None:
    """Let this process tokenize on as many threads as torch computes on. A pool process is
    forked before it tokenizes anything and forks nothing itself, so the tokenizer's threads are
    safe there; rescoring tokenizes each chunk beside the forward, and on two cores one thread
    made that the largest cost outside the model (tiny model, 512 solutions: 0.126 s on one
    thread, 0.08 s on two). A worker held to OMP_NUM_THREADS shares the machine with others:
    its tokenizer is held to the same count."""
    if threads := os.environ.get("OMP_NUM_THREADS"):
        os.environ.setdefault("RAYON_NUM_THREADS", threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true"


@task_prerun.connect
@task_postrun.connect
def close_old_database_connections(task=None, **_) -> None:
    """Between two tasks, what Django does between two requests: close a connection that is past
    DB_CONN_MAX_AGE, broken or left in a transaction, and health-check the others at their next
    use. Celery's own fixup would close them all (settings.CELERY_DB_REUSE_MAX). Not for a task run
    eagerly: it runs inside its caller, whose transaction it must not end."""
    if not getattr(getattr(task, "request", None), "is_eager", False):
        close_old_connections()


@task_postrun.connect
def stop_heartbeats(**_) -> None:
    """A task that ended without finishing its job no longer vouches for it."""
    from jobs.holders import heartbeats  # Django code: config/__init__ imports this module before Django is set up

    heartbeats.release_all()
