"""Which worker queue a job kind's task goes to, and what a pending job waits behind there.

A worker serves its queues one task at a time (concurrency 1 under `./stepwise run`), so a
pending job waits for the jobs already running on its queue and for those sent before it: the
job pages say which, so a wait has a reason on screen.
"""
from __future__ import annotations

from fnmatch import fnmatchcase

from django.conf import settings
from django.db.models import Q

from jobs.models import Job, job_kinds
from jobs.states import JobState

SHOWN = 3  # jobs named on a page; the rest are counted


def queue_of(kind: type[Job]) -> str:
    """The queue of `kind`'s task, as Celery routes it: an exact route, else the first pattern
    that matches, else the default queue."""
    routes = settings.CELERY_TASK_ROUTES
    if kind.task_name in routes:
        return routes[kind.task_name]["queue"]
    for pattern, route in routes.items():
        if fnmatchcase(kind.task_name, pattern):
            return route["queue"]
    return settings.CELERY_TASK_DEFAULT_QUEUE


def ahead_of(job: Job) -> list[Job]:
    """The jobs a pending `job` waits behind on its queue: those running there, then those
    pending since before it, oldest first (every project's: the workers are the site's)."""
    if job.state != JobState.PENDING:
        return []
    queue = queue_of(type(job))
    ahead: list[Job] = []
    for kind in job_kinds():
        if queue_of(kind) != queue:
            continue
        rows = kind.objects.filter(Q(state=JobState.RUNNING) | Q(state=JobState.PENDING, created_at__lt=job.created_at))
        ahead += rows.exclude(pk=job.pk) if kind is type(job) else rows
    return sorted(ahead, key=lambda other: (other.state != JobState.RUNNING, other.created_at))


def waiting_line(job: Job) -> str:
    """What a pending job waits behind, in words ("" when nothing is ahead of it). Jobs of its
    own project are named; another project's are only counted, as its pages are not the reader's."""
    ahead = ahead_of(job)
    if not ahead:
        return ""
    own = [other for other in ahead if _project_id(other) == _project_id(job)]
    named = [f"{other._meta.verbose_name} {other.pk} ({other.state})" for other in own[:SHOWN]]
    others = len(ahead) - len(named)
    if others:
        named.append(f"{others} {'more job' if others == 1 else 'more jobs'}" if own else
                     f"{others} {'job' if others == 1 else 'jobs'} of other projects")
    return f"Waits for the {queue_of(type(job))} worker, behind {', '.join(named)}."


def _project_id(job: Job) -> int | None:
    return getattr(job, "project_id", None)
