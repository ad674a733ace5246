"""Per-user request rates: one counting rule for every limit (the API's throttles, heartbeats).

Requests are counted per fixed window of the rate's period ("20/minute": per clock minute) in
`caches["throttle"]`, which every web process shares (Redis, or files without it), so a limit
holds for the whole site, not per gunicorn worker. With Redis the count is an atomic add and
increment, so concurrent requests are never lost from it; the file-based fallback of the
embedded default increments by read-then-write, so a burst of concurrent requests may be
counted short there.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from django.core.cache import caches
from rest_framework.throttling import BaseThrottle

from infra.client_address import client_address
from infra.env import Rate, parse_rate


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    retry_after: float  # seconds until the window ends


def check(scope: str, ident: object, rate: Rate | tuple[int, int]) -> Verdict:
    """Count one request of `ident` (a user id) in `scope` against `rate` (count, seconds)."""
    limit, period = rate
    now = time.time()
    window = int(now // period)
    key = f"stepwise:{scope}:{ident}:{window}"
    cache = caches["throttle"]
    cache.add(key, 0, timeout=2 * period)
    try:
        count = cache.incr(key)
    except ValueError:  # Expired between add and incr: this one is the window's first.
        cache.set(key, 1, timeout=2 * period)
        count = 1
    return Verdict(count <= limit, (window + 1) * period - now)


class UserRate(BaseThrottle):
    """A DRF throttle by this module's rule: `rate()` requests per user (by address when anonymous,
    as infra/client_address.py decides it, not DRF's `get_ident`, which believes any X-Forwarded-For)."""

    scope = ""

    def rate(self) -> str:
        raise NotImplementedError

    def allow_request(self, request, view) -> bool:
        ident = request.user.pk if request.user and request.user.is_authenticated else client_address(request)
        self.verdict = check(self.scope, ident, parse_rate(self.rate()))
        return self.verdict.allowed

    def wait(self) -> float | None:
        return self.verdict.retry_after
