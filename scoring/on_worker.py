"""Answers the score worker computes while a web request waits: /api/score and /api/search.

The model lives in the worker of the `score` queue (loaded once, on the GPU where there is one),
never in a web process, and never behind rescoring or training on `ml`: the view sends the task
and waits at most its timeout.

Every request is bounded three ways. Each wait holds a web thread (30 s for a score, 120 s for a
search, by default): requests within every per-user limit once held all of a process's threads,
and annotators' pages waited behind them; so at most STEPWISE_SCORE_CONCURRENCY requests of one
process wait at once, and one more is told to come back (WorkerBusy, the API's 429). One user may
have STEPWISE_SCORE_IN_FLIGHT requests in flight across every web process (counted in the
throttle cache), so one token cannot fill the worker's queue. And the wait's end is one deadline
the task carries: the message expires then, the task is revoked when the wait ends, and the task
itself stops between chunks once the deadline has passed, so nothing is computed for nobody.
"""
import datetime as dt
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from celery import states
from celery.exceptions import TimeoutError as CeleryTimeout
from django.conf import settings
from django.core.cache import caches

from jobs.models import BROKER_UNREACHABLE
from scoring.models import ModelVersion
from scoring.tasks import score_texts_task, search_task

logger = logging.getLogger(__name__)

# Seconds the worker may go past a request's deadline inside one forward pass before its
# process is killed (the soft limit, soon after the deadline, interrupts the task first).
HARD_LIMIT_GRACE = 15
# Seconds the soft limit waits past the deadline. The task's own check between chunks stops it
# first and logs that it did; a soft limit at the deadline itself landed, now and then, while
# that line was being written, and the line was lost.
SOFT_LIMIT_GRACE = 1


class ScoringUnavailable(RuntimeError):
    """No score worker answered in time, or the model cannot be used: the API says 503."""


class WorkerBusy(RuntimeError):
    """This process has STEPWISE_SCORE_CONCURRENCY requests waiting on the worker, or the user
    STEPWISE_SCORE_IN_FLIGHT: the API says 429."""

    retry_after = 1  # seconds: a score takes about that


class Waits:
    """The requests of this process now waiting on the score worker."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    @contextmanager
    def place(self, what: str) -> Iterator[None]:
        """Hold one of the STEPWISE_SCORE_CONCURRENCY places while waiting, or raise WorkerBusy."""
        with self._lock:
            if self.count >= settings.STEPWISE_SCORE_CONCURRENCY:
                raise WorkerBusy(f"{self.count} {what} requests already wait on the score worker "
                                 f"(STEPWISE_SCORE_CONCURRENCY)")
            self.count += 1
        try:
            yield
        finally:
            with self._lock:
                self.count -= 1


waits = Waits()


@contextmanager
def in_flight(*, user_id: int | None, hold_seconds: float) -> Iterator[None]:
    """Hold one of the user's STEPWISE_SCORE_IN_FLIGHT places while the request is in flight, or raise WorkerBusy.

    The places are keys of the throttle cache (Redis when REDIS_URL is set), so the bound holds
    across web processes; each is added atomically and deleted on every way out of the request.
    Each expires after `hold_seconds` too: a web process killed mid-wait does not keep its place.
    """
    cache, mine = caches["throttle"], uuid.uuid4().hex
    keys = [f"score-in-flight:{user_id}:{place}" for place in range(settings.STEPWISE_SCORE_IN_FLIGHT)]
    try:
        key = next((key for key in keys if cache.add(key, mine, timeout=hold_seconds)), None)
    except BROKER_UNREACHABLE as error:  # Redis away: so is the score worker's broker
        raise ScoringUnavailable(f"Redis cannot be reached ({type(error).__name__}); try again shortly") from None
    if key is None:
        raise WorkerBusy(f"{len(keys)} requests of this user are already in flight (STEPWISE_SCORE_IN_FLIGHT)")
    try:
        yield
    finally:
        try:
            cache.delete(key)
        except BROKER_UNREACHABLE:
            pass  # it expires after hold_seconds


@contextmanager
def place_to_wait(*, user_id: int | None, what: str, timeout: float) -> Iterator[None]:
    """This process's place and the user's place for one request of `timeout` seconds, or WorkerBusy.

    Taken before the request's body is read: a refusal costs the server next to nothing.
    """
    with waits.place(what), in_flight(user_id=user_id, hold_seconds=timeout + HARD_LIMIT_GRACE):
        yield


def score_on_worker(
    *, items: list[tuple[str, list[str]]], model_version: ModelVersion, timeout: float | None = None
) -> list[list[dict]]:
    """rescore.score_texts on the worker, waiting at most `timeout` seconds; ValueError for bad items."""
    timeout = settings.STEPWISE_SCORE_API_TIMEOUT if timeout is None else timeout
    answer = answer_from_worker(score_texts_task, (model_version.pk, [list(item) for item in items]),
                                timeout=timeout, what="scoring")
    return answer["steps"]


def search_on_worker(*, body: dict, model_version: ModelVersion, timeout: float | None = None) -> dict:
    """search.runs.run_search on the worker; the web process waits at most `timeout` seconds."""
    timeout = settings.STEPWISE_SEARCH_API_TIMEOUT if timeout is None else timeout
    return answer_from_worker(search_task, (model_version.pk, body), timeout=timeout, what="search")


def answer_from_worker(task, args: tuple, *, timeout: float, what: str) -> dict:
    """Run `task` on the score worker and wait at most `timeout` seconds for its answer, in a place
    the view took (place_to_wait).

    The task answers data: {"error", "status": 400} becomes ValueError, any other error
    ScoringUnavailable (the API's 503), and so does a task that ended without answering: its
    message expired before a worker took it (revoked), or a time limit ended it outside its own
    handling (a soft limit's signal can land between two tasks of one worker process).
    """
    try:
        result = send_with_deadline(task, args, deadline=time.time() + timeout)
    except (*BROKER_UNREACHABLE, RuntimeError) as error:  # RuntimeError: Celery's, for a result store it lost
        raise ScoringUnavailable(f"the {what} worker's broker cannot be reached ({type(error).__name__})") from None
    try:
        answer = result.get(timeout=timeout, interval=0.02, propagate=False)
    except BROKER_UNREACHABLE as error:
        raise ScoringUnavailable(f"the {what} worker's result store cannot be reached ({type(error).__name__})") \
            from None
    except CeleryTimeout:
        revoke(result)
        raise ScoringUnavailable(
            f"no {what} worker answered within {timeout:g} s; is the score worker running?"
        ) from None
    state = result.state
    result.forget()  # Read once: no result left in the backend.
    if state == states.REVOKED:  # the worker found the message expired
        raise ScoringUnavailable(f"no {what} worker took the request within {timeout:g} s")
    if state != states.SUCCESS:
        raise ScoringUnavailable(f"{what} failed on the worker: {type(answer).__name__}: {answer}")
    if answer.get("status") == 400:
        raise ValueError(answer["error"])
    if "error" in answer:
        raise ScoringUnavailable(answer["error"])
    return answer


def send_with_deadline(task, args: tuple, *, deadline: float):
    """Send `task` carrying the request's deadline (a Unix time): its message expires then, the task
    checks it between chunks, and it may run no longer than the whole wait and a second (its soft
    time limit)."""
    seconds = max(deadline - time.time(), 0.1)
    return task.apply_async(
        args=args, kwargs={"deadline": deadline}, expires=dt.datetime.fromtimestamp(deadline, tz=dt.UTC),
        soft_time_limit=seconds + SOFT_LIMIT_GRACE, time_limit=seconds + HARD_LIMIT_GRACE,
    )


def revoke(result) -> None:
    """Tell the workers to drop a task whose request gave up: a queued message is discarded.

    A broker that cannot take the word costs nothing more: the message expires and the task stops
    at its deadline all the same.
    """
    try:
        result.revoke()
    except Exception:  # the deadline still bounds the task; the 503 must go out
        logger.warning("could not revoke %s; it stops at its deadline", result.id, exc_info=True)
