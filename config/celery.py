"""The Celery app, set up as Celery's Django guide shows."""
import os

from celery import Celery
from celery.signals import task_postrun, worker_ready
from django.db import connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Workers log to files: no tqdm bars from model loading, and no tokenizer threads in forked children.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

app = Celery("stepwise")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def reconcile_jobs_at_start(**_) -> None:
    """A starting worker resends the tasks of jobs a dead worker held or a lost broker dropped,
    so a killed worker's job resumes within seconds of the restart, beat or no beat."""
    from annotate.pool import recovery  # Django models: config/__init__ imports this before the app registry is ready

    try:
        recovery.reconcile(pending_after=0)
    finally:
        connections.close_all()  # the main process keeps no connection its children could share


@task_postrun.connect
def stop_heartbeats(**_) -> None:
    """A task that ended without finishing its job no longer vouches for it."""
    from annotate.models.jobs import heartbeats  # Django models: imported before the app registry is ready

    heartbeats.release_all()
