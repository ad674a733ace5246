"""The one counter of events in a time window, kept where every web process sees it: per-user
request rates (infra/throttling.py) and a known device's wrong passwords (infra/login_lockout.py).

Counts live in ``caches["throttle"]``: Redis when ``REDIS_URL`` is set, else files in the data dir.
With Redis a count is an atomic add and increment, so concurrent events are never lost from it;
the file-based fallback increments by read-then-write, so a burst may be counted short there.

When that store cannot be reached (Redis stopped or unreachable), the caller chose beforehand what
a count means: ``fail_open=True`` counts nothing and lets the request on (a labeling heartbeat: an
outage must not stop annotators); ``fail_open=False`` raises ``CounterUnavailable``, and the caller
refuses or falls back to a count it can read elsewhere (a login's counts in the database).
"""
from __future__ import annotations

import logging
import time

from django.core.cache import caches
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)
_OUTAGE = (RedisError, OSError)  # Redis down or slow; the file-based cache's folder unwritable
_LOG_EVERY_SECONDS = 10.0  # one warning per this long in an outage, not one per request
_last_logged = [0.0]


class CounterUnavailable(Exception):
    """The store of counts cannot be reached, and the caller asked to fail closed."""


def add_one(key: str, *, seconds: int, fail_open: bool, window_from_last: bool = False) -> int:
    """Count one event under `key` and return the count so far. The count is forgotten `seconds`
    after its first event, or after its last with `window_from_last`. In an outage: 0 when
    `fail_open`, else CounterUnavailable."""
    cache = caches["throttle"]
    try:
        cache.add(key, 0, timeout=seconds)
        try:
            count = cache.incr(key)
        except ValueError:  # expired between add and incr: this event is the window's first
            cache.set(key, 1, timeout=seconds)
            count = 1
        if window_from_last:
            cache.touch(key, timeout=seconds)
        return int(count)
    except _OUTAGE as error:
        return _unavailable(error, fail_open)


def read(key: str, *, fail_open: bool) -> int:
    """The count under `key` (0 when none); in an outage 0 when `fail_open`, else CounterUnavailable."""
    try:
        return int(caches["throttle"].get(key, 0))
    except _OUTAGE as error:
        return _unavailable(error, fail_open)


def forget(key: str) -> None:
    """Drop the count under `key`; in an outage it stays, to run out with its window."""
    try:
        caches["throttle"].delete(key)
    except _OUTAGE as error:
        _log(error)


def _unavailable(error: Exception, fail_open: bool) -> int:
    _log(error)
    if fail_open:
        return 0
    raise CounterUnavailable(str(error)) from error


def _log(error: Exception) -> None:
    now = time.monotonic()
    if now - _last_logged[0] >= _LOG_EVERY_SECONDS:
        _last_logged[0] = now
        logger.warning("counts cannot be kept (%s: %s); rates fail open, logins closed", type(error).__name__, error)
