"""Answers the ml worker computes while a web request waits: /api/score and /api/search.

The model lives in the worker (loaded once, on the GPU where there is one), never in a web
process: the view sends the task and waits at most its timeout, and the message expires with
the wait, so a worker that comes up late does not compute answers nobody is waiting for.

Each wait holds a web thread (30 s for a score, 120 s for a search, by default). Requests within
every per-user limit once held all of a process's threads, and annotators' pages waited behind
them; so at most STEPWISE_SCORE_CONCURRENCY requests of one process wait at once, scores and
searches together, and one more is told to come back (WorkerBusy, the API's 429).
"""
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from celery.exceptions import TimeoutError as CeleryTimeout
from django.conf import settings

from scoring.models import ModelVersion
from scoring.tasks import score_texts_task, search_task


class ScoringUnavailable(RuntimeError):
    """No ml worker answered in time, or the model cannot be used: the API says 503."""


class WorkerBusy(RuntimeError):
    """This process already has STEPWISE_SCORE_CONCURRENCY requests waiting on the worker: the API says 429."""

    retry_after = 1  # seconds: a score takes about that


class Waits:
    """The requests of this process now waiting on the ml worker."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    @contextmanager
    def place(self, what: str) -> Iterator[None]:
        """Hold one of the STEPWISE_SCORE_CONCURRENCY places while waiting, or raise WorkerBusy."""
        with self._lock:
            if self.count >= settings.STEPWISE_SCORE_CONCURRENCY:
                raise WorkerBusy(f"{self.count} {what} requests already wait on the ml worker "
                                 f"(STEPWISE_SCORE_CONCURRENCY)")
            self.count += 1
        try:
            yield
        finally:
            with self._lock:
                self.count -= 1


waits = Waits()


def score_on_worker(
    *, items: list[tuple[str, list[str]]], model_version: ModelVersion, timeout: float | None = None
) -> list[list[dict]]:
    """rescore.score_texts on the worker, waiting at most `timeout` seconds; ValueError for bad items."""
    timeout = settings.STEPWISE_SCORE_API_TIMEOUT if timeout is None else timeout
    answer = answer_from_worker(score_texts_task, (model_version.pk, [list(item) for item in items]),
                                timeout=timeout, what="scoring")
    return answer["steps"]


def answer_from_worker(task, args: tuple, *, timeout: float, what: str) -> dict:
    """Run `task` on the ml worker and wait at most `timeout` seconds for its answer.

    The task answers data: {"error", "status": 400} becomes ValueError, any other error
    ScoringUnavailable (the API's 503). WorkerBusy, sending nothing, when this process has no
    place left to wait in.
    """
    with waits.place(what):
        result = task.apply_async(args=args, expires=timeout)
        try:
            answer = result.get(timeout=timeout, interval=0.02)
        except CeleryTimeout:
            raise ScoringUnavailable(
                f"no {what} worker answered within {timeout:g} s; is the ml worker running?"
            ) from None
    result.forget()  # Answered once, read once: no result left in the backend.
    if answer.get("status") == 400:
        raise ValueError(answer["error"])
    if "error" in answer:
        raise ScoringUnavailable(answer["error"])
    return answer


def search_on_worker(*, body: dict, model_version: ModelVersion, timeout: float | None = None) -> dict:
    """search.runs.run_search on the worker; the web process waits at most `timeout` seconds."""
    timeout = settings.STEPWISE_SEARCH_API_TIMEOUT if timeout is None else timeout
    return answer_from_worker(search_task, (model_version.pk, body), timeout=timeout, what="search")
