"""Celery tasks of the labeling side. Each takes ids, fetches, calls one function."""
from celery import shared_task


@shared_task(name="annotate.ping_task")
def ping_task(value: str) -> str:
    """A no-op round trip, used by health checks and to prove a worker is consuming."""
    return value
