"""When to retry an HTTP call and how long to wait first: the one retry policy of Stepwise's clients.

Standard library only. It lives here, in the package RL trainers put on their path without
Django or torch, so that this package stays standalone; scoring's own HTTP clients (the
OpenAI-compatible generator, the remote /pooling scorer) import it from here, never the reverse.

The policy: a call is retried when the server, not the request, failed (a lost connection, a
timeout, 408, 409, 429 or any 5xx, as the official `openai` client decides), at most `retries`
more times. Before each retry it waits what the server's `Retry-After` asks (seconds or an HTTP
date), else a full-jitter exponential backoff (uniform in [0, backoff * 2^retry]); both capped.
"""
from __future__ import annotations

import email.message
import email.utils
import http.client
import json
import math
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import IO, Any, TypeVar

# 408 request timeout, 409 conflict (a lock held elsewhere), 429 rate limit; 5xx is checked apart.
RETRY_STATUSES = frozenset({408, 409, 429})
# No wait is longer, whatever the backoff or the server asks: a trainer waits, it does not stall.
MAX_DELAY = 30.0
# What urllib raises when the connection, not the answer, failed (HTTPError is a URLError too).
URLLIB_TRANSIENT = (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException)

T = TypeVar("T")
# datetime.UTC is Python 3.11+; the client installs on 3.10 too.
UTC = timezone.utc  # noqa: UP017


def is_retryable_status(status: int) -> bool:
    """An answer another try may change: the server was busy, overloaded or failing."""
    return status in RETRY_STATUSES or status >= 500


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """A `Retry-After` header in seconds: delta-seconds ("120") or an HTTP date (RFC 9110 §10.2.3).

    A time already past is 0; no header, or one neither form reads, is None (use the backoff).
    """
    if not value or not value.strip():
        return None
    try:
        seconds = float(value)  # servers send "1.5" too, though the RFC has whole seconds
    except ValueError:
        return _seconds_until(value, now=now or datetime.now(UTC))
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _seconds_until(http_date: str, *, now: datetime) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(http_date)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000" parses as naive; HTTP dates are always GMT
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


@dataclass(frozen=True)
class RetryPolicy:
    """How many times to try again and how long to wait between tries."""

    retries: int  # further attempts after the first
    backoff: float  # bound of the first wait in seconds, doubled for each later one
    cap: float = MAX_DELAY

    @property
    def attempts(self) -> int:
        return self.retries + 1

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds before retry number `retry` (0 for the first).

        The server's Retry-After when it named one; else full jitter, so that clients failed
        together do not come back in lockstep on a recovering server.
        """
        if retry_after is not None:
            return min(self.cap, retry_after)
        return random.uniform(0, min(self.cap, self.backoff * 2**retry))

    def call(
        self,
        send: Callable[[], T],
        *,
        retryable: Callable[[Exception], bool],
        retry_after: Callable[[Exception], float | None] = lambda error: None,
        on_retry: Callable[[Exception], None] | None = None,
    ) -> T:
        """`send()`'s answer; an error it raises is retried when `retryable(error)`, else re-raised,
        as is the last attempt's. `on_retry` sees each error that is retried (to count them)."""
        for attempt in range(self.attempts):
            try:
                return send()
            except Exception as error:
                if attempt == self.retries or not retryable(error):
                    raise
                if on_retry is not None:
                    on_retry(error)
                time.sleep(self.delay(attempt, retry_after(error)))
        raise AssertionError("unreachable: the last attempt returns or raises")


def urllib_retryable(error: Exception) -> bool:
    """For calls through urllib: a retryable status, or a connection that failed."""
    if isinstance(error, urllib.error.HTTPError):
        return is_retryable_status(error.code)
    return isinstance(error, URLLIB_TRANSIENT)


def urllib_retry_after(error: Exception) -> float | None:
    if isinstance(error, urllib.error.HTTPError) and error.headers:
        return retry_after_seconds(error.headers.get("Retry-After"))
    return None


class RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """Follows no redirect: the 3xx is raised as the HTTPError it is, naming its Location.

    urllib's own handler follows one to any origin and takes the Authorization header along
    (it drops only the body's headers), handing the token to whoever the server points at.
    """

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: email.message.Message, newurl: str) -> urllib.request.Request | None:
        raise urllib.error.HTTPError(req.full_url, code, f"{msg}: a redirect to {newurl}, not followed",
                                     headers, fp)


# urlopen's handlers, the redirect one replaced.
_OPENER = urllib.request.build_opener(RefuseRedirects)


def post_json(url: str, body: dict[str, Any], *, headers: dict[str, str], timeout: float, policy: RetryPolicy,
              on_attempt: Callable[[], None] | None = None) -> dict[str, Any]:
    """POST `body` as JSON through urllib and return the JSON answer, retried by `policy`.

    The last failure is raised as urllib raised it (HTTPError, URLError, ...) for the caller to
    word, a redirect among them (`RefuseRedirects`); `on_attempt` is called before every attempt,
    retries included (to count requests).
    """
    data = json.dumps(body).encode()

    def send() -> dict[str, Any]:
        if on_attempt is not None:
            on_attempt()
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        with _OPENER.open(request, timeout=timeout) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    return policy.call(send, retryable=urllib_retryable, retry_after=urllib_retry_after)
