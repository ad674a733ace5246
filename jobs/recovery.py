"""Recovery after a lost broker or a dead worker: jobs are found from their database rows.

Redis here keeps nothing on disk and the embedded broker is a folder: a restart, a flush
or a deleted folder loses every queued message, and a worker killed with -9 leaves its job
running under nobody. `reconcile` resends the task of every unfinished job of every registered
kind (`jobs.models.job_kinds()`: import, export, rescore, training run, generation run, rollout
labeling) that lost either:

- pending for longer than `pending_after` seconds since its message was last sent (0 when a
  worker starts, STEPWISE_JOB_REQUEUE_SECONDS on beat): the message may be gone. Sending
  it again is safe: `Job.start` claims a job once, so a duplicate finds it taken;
- running with its holder gone (heartbeat stale, or its process dead on this host): a
  resumable job is taken over by the resent task (`Job.start`'s guarded takeover); one that
  cannot resume (a training run) goes back to pending first and starts over. The same
  window applies, so a rescore whose chunks wait behind other work is resent at most once
  per window (a duplicate chunk message finds its chunk done and does nothing).

It runs on beat (settings.CELERY_BEAT_SCHEDULE) and when a worker starts (config/celery.py),
so a killed worker's job is picked up as soon as a worker is back, not after Redis's
visibility timeout. Job kinds come from the registry their classes fill, so neither app names
the other's.
"""
from __future__ import annotations

import datetime as dt
import logging

from django.db.models import Q
from django.utils import timezone

from jobs.models import job_kinds
from jobs.states import JobState

logger = logging.getLogger(__name__)


def reconcile(*, pending_after: float) -> list[str]:
    """Resend the task of every job that lost its message or its worker; returns "Model:pk" each."""
    resent = []
    cutoff = timezone.now() - dt.timedelta(seconds=pending_after)
    for model in job_kinds():
        # A message sent within `pending_after` is given its time; at most one resend per window.
        not_sent_lately = Q(enqueued_at__lte=cutoff) | Q(enqueued_at__isnull=True, created_at__lte=cutoff)
        # Read before any orphan is requeued, so that a requeued run is not sent twice.
        waiting = list(model._default_manager.filter(not_sent_lately, state=JobState.PENDING))
        orphans = [job for job in model._default_manager.filter(not_sent_lately).running_without_holder()
                   if job.resumable or job.requeue()]
        for job in [*waiting, *orphans]:
            job.mark_enqueued()
            job.send_task()
            resent.append(f"{model.__name__}:{job.pk}")
    if resent:
        logger.warning("reconciler resent the tasks of %s", ", ".join(resent))
    return resent
