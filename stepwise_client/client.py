"""The HTTP side: `POST /api/score` in batches the server accepts, with timeouts and retries.

Plain standard library (urllib), so a training job needs nothing installed beyond Stepwise's
source. The limits mirror scoring/web/api/serializers.py: a batch holds at most 64 solutions and
400,000 characters of text; the client cuts batches to fit instead of getting a 400.
"""
from __future__ import annotations

import os
import urllib.error
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from stepwise_client.retrying import URLLIB_TRANSIENT, RetryPolicy, post_json

MAX_ITEMS = 64
MAX_TOTAL_TEXT = 400_000


class StepwiseError(RuntimeError):
    """The server refused a request (bad body, bad token) or kept failing after the retries."""


def step_probabilities(answer: dict) -> list[float]:
    """The per-step rewards of one scored solution: each step's P(correct)."""
    return [step["p"] for step in answer["steps"]]


class StepwiseClient:
    """Scores (problem, steps) pairs with the current PRM, or the version named in `model`.

    `url` and `token` default to the STEPWISE_URL and STEPWISE_TOKEN environment variables
    (a token comes from `./stepwise manage create_api_token USERNAME`, a reviewer or admin).
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        model: str | None = None,
        batch_size: int = MAX_ITEMS,
        timeout: float = 120.0,
        retries: int = 5,
        backoff: float = 1.0,
        concurrency: int = 1,
    ):
        url = url or os.environ.get("STEPWISE_URL", "")
        token = token or os.environ.get("STEPWISE_TOKEN", "")
        if not url:
            raise StepwiseError("no Stepwise URL: pass url= or set STEPWISE_URL")
        if not token:
            raise StepwiseError("no API token: pass token= or set STEPWISE_TOKEN")
        if not 1 <= batch_size <= MAX_ITEMS:
            raise ValueError(f"batch_size must be between 1 and {MAX_ITEMS}, not {batch_size}")
        self.url = url.rstrip("/")
        self.token = token
        self.model = model
        self.batch_size = batch_size
        self.timeout = timeout
        # The server's 429 (over STEPWISE_SCORE_RATE) and 503 (no model, or no ml worker answered
        # in time) pass, as do a proxy's 502 / 504 in front of it: all are retried.
        self.retry = RetryPolicy(retries=retries, backoff=backoff)
        self.concurrency = max(1, concurrency)

    def score(self, items: Sequence[tuple[str, Sequence[str]]]) -> list[list[float]]:
        """Each step's probability of being correct, for every (problem, steps) pair, in order."""
        return [step_probabilities(answer) for answer in self.answers(items)]

    def answers(self, items: Sequence[tuple[str, Sequence[str]]]) -> list[dict]:
        """The server's answer for every (problem, steps) pair, in order: its `steps` (p, mean,
        sigma each) and its solution `score` (product, min, last, mean, sigma)."""
        batches = list(self._batches(items))
        if self.concurrency == 1 or len(batches) < 2:
            answers = [self._score_batch(batch) for batch in batches]
        else:
            with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
                answers = list(pool.map(self._score_batch, batches))
        return [steps for answer in answers for steps in answer]

    def _batches(self, items: Sequence[tuple[str, Sequence[str]]]):
        batch: list[tuple[str, list[str]]] = []
        characters = 0
        for problem, steps in items:
            size = len(problem) + sum(map(len, steps))
            if batch and (len(batch) == self.batch_size or characters + size > MAX_TOTAL_TEXT):
                yield batch
                batch, characters = [], 0
            batch.append((problem, list(steps)))
            characters += size
        if batch:
            yield batch

    def _score_batch(self, batch: list[tuple[str, list[str]]]) -> list[dict]:
        body: dict = {"items": [{"problem": problem, "steps": steps} for problem, steps in batch]}
        if self.model:
            body["model"] = self.model
        items = self._post("/api/score", body)["items"]
        if any("score" not in item for item in items):
            raise StepwiseError("the server's /api/score answer has no solution `score`: update the server")
        return items

    def _post(self, path: str, body: dict) -> dict:
        headers = {"Authorization": f"Token {self.token}", "Content-Type": "application/json",
                   "Accept": "application/json"}
        try:
            return post_json(self.url + path, body, headers=headers, timeout=self.timeout, policy=self.retry)
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")[:2000]
            raise StepwiseError(f"POST {path} answered {error.code}: {detail}") from None
        except URLLIB_TRANSIENT as error:
            raise StepwiseError(f"POST {path} failed after {self.retry.attempts} attempts: {error}") from None
