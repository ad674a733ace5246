"""Celery tasks of the labeling side. Each takes ids, fetches, calls one function."""
from celery import shared_task


@shared_task(name="annotate.ping_task")
def ping_task(value: str) -> str:
    """A no-op round trip, used by health checks and to prove a worker is consuming."""
    return value


@shared_task(name="annotate.export_task", acks_late=True)
def export_task(export_job_id: int) -> int:
    """Write one ExportJob's file; idempotent (a finished job is skipped, a rerun rewrites)."""
    from annotate import exporting

    return exporting.run_export_job(job_id=export_job_id).lines


@shared_task(name="annotate.import_pool_task", acks_late=True)
def import_pool_task(import_job_id: int) -> int:
    """Import one ImportJob's file; idempotent (content hashes: a rerun creates nothing twice)."""
    from annotate import importing

    return importing.run_import_job(job_id=import_job_id).created


@shared_task(name="annotate.remove_expired_uploads_task")
def remove_expired_uploads_task() -> int:
    """Delete import uploads and reports past STEPWISE_RETENTION_DAYS (0 keeps them); run daily by beat."""
    from django.conf import settings

    from annotate import importing

    if not settings.STEPWISE_RETENTION_DAYS:
        return 0
    return len(importing.remove_expired_uploads(days=settings.STEPWISE_RETENTION_DAYS))
