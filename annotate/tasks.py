"""Celery tasks of the labeling side. Each takes ids, fetches, calls one function.

The job tasks are acks_late with reject_on_worker_lost: a worker child that dies mid-task
puts its message back at once. A lost database connection releases the job
(`Job.failure_recorded`) and the task retries it on a fresh connection.
"""
from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from annotate.pool import exporting, importing
from jobs import recovery

# A job task retries when its database connection is lost (a restart, pg_terminate_backend).
JOB_TASK_OPTIONS = {
    "acks_late": True, "reject_on_worker_lost": True, "autoretry_for": (OperationalError, InterfaceError),
    "retry_backoff": 2, "retry_backoff_max": 30, "max_retries": 8,
}


@shared_task(name="annotate.ping_task")
def ping_task(value: str) -> str:
    """A no-op round trip, used by health checks and to prove a worker is consuming."""
    return value


@shared_task(name="annotate.export_task", **JOB_TASK_OPTIONS)
def export_task(export_job_id: int) -> int:
    """Write one ExportJob's file; idempotent (a finished job is skipped, a rerun rewrites)."""
    return exporting.run_export_job(job_id=export_job_id).lines


@shared_task(name="annotate.import_pool_task", **JOB_TASK_OPTIONS)
def import_pool_task(import_job_id: int) -> int:
    """Import one ImportJob's file; idempotent (content hashes: a rerun creates nothing twice)."""
    return importing.run_import_job(job_id=import_job_id).created


@shared_task(name="annotate.remove_expired_uploads_task")
def remove_expired_uploads_task() -> int:
    """Delete import uploads and reports past STEPWISE_RETENTION_DAYS (0 keeps them); run daily by beat."""
    if not settings.STEPWISE_RETENTION_DAYS:
        return 0
    return len(importing.remove_expired_uploads(days=settings.STEPWISE_RETENTION_DAYS))


@shared_task(name="annotate.reconcile_jobs_task")
def reconcile_jobs_task(pending_after: float | None = None) -> list[str]:
    """Beat's entry: resend the tasks of jobs whose message or worker was lost (jobs.recovery)."""
    return recovery.reconcile(
        pending_after=settings.STEPWISE_JOB_REQUEUE_SECONDS if pending_after is None else pending_after
    )
