"""Per-user request rates: one counting rule for every limit (the API's throttles, heartbeats,
wrong API tokens).

Requests are counted per fixed window of the rate's period ("20/minute": per clock minute) by
infra/counter.py, in the cache every web process shares, so a limit holds for the whole site, not
per web process. Each limit says what an outage of that cache means: `fail_open` lets requests
on uncounted (labeling must go on while Redis is away), else each is refused until it is back.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from rest_framework.throttling import BaseThrottle

from infra import counter
from infra.client_address import client_address
from infra.env import Rate, parse_rate


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    retry_after: float  # seconds until the window ends


OUTAGE_RETRY_SECONDS = 5.0  # what a request refused because counts cannot be kept is told to wait


def check(scope: str, ident: object, rate: Rate | tuple[int, int], *, fail_open: bool) -> Verdict:
    """Count one request of `ident` (a user id) in `scope` against `rate` (count, seconds); when
    counts cannot be kept, allowed if `fail_open`, else refused."""
    limit, period = rate
    now = time.time()
    window = int(now // period)
    try:
        count = counter.add_one(f"stepwise:{scope}:{ident}:{window}", seconds=2 * period, fail_open=fail_open)
    except counter.CounterUnavailable:
        return Verdict(False, OUTAGE_RETRY_SECONDS)
    return Verdict(count <= limit, (window + 1) * period - now)


class UserRate(BaseThrottle):
    """A DRF throttle by this module's rule: `rate()` requests per user (by address when anonymous,
    as infra/client_address.py decides it, not DRF's `get_ident`, which believes any X-Forwarded-For)."""

    scope = ""
    fail_open = True  # a rate of use, not a defence of credentials: an outage lets requests on

    def rate(self) -> str:
        raise NotImplementedError

    def allow_request(self, request, view) -> bool:
        ident = request.user.pk if request.user and request.user.is_authenticated else client_address(request)
        self.verdict = check(self.scope, ident, parse_rate(self.rate()), fail_open=self.fail_open)
        return self.verdict.allowed

    def wait(self) -> float | None:
        return self.verdict.retry_after
