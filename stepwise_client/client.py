"""The HTTP side: `POST /api/score` in batches the server accepts, with timeouts and retries.

Plain standard library (urllib), so a training job installs nothing beyond this package. The
limits mirror scoring/web/api/serializers.py: a batch holds at most 64 solutions and 400,000
characters of text; the client cuts batches to fit instead of getting a 400. A completion counts
whole: the steps the server cuts from it are never longer than it is.
"""
from __future__ import annotations

import os
import urllib.error
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from stepwise_client.retrying import URLLIB_TRANSIENT, RetryPolicy, post_json

MAX_ITEMS = 64
MAX_TOTAL_TEXT = 400_000

# JSON objects: one item of a request's `items`, and the server's answer for one solution.
Item = dict[str, Any]
Answer = dict[str, Any]


class StepwiseError(RuntimeError):
    """The server refused a request (bad body, bad token) or kept failing after the retries."""


def step_probabilities(answer: Answer) -> list[float]:
    """The per-step rewards of one scored solution: each step's P(correct)."""
    return [step["p"] for step in answer["steps"]]


def step_texts(answer: Answer) -> list[str]:
    """The steps the server cut a completion into, in order (an answer to `completion_answers`)."""
    return [step["text"] for step in answer["steps"]]


def text_size(item: Item) -> int:
    """The characters of one /api/score item, as the server counts them against its limit."""
    return len(item["problem"]) + (len(item["completion"]) if "completion" in item else sum(map(len, item["steps"])))


class StepwiseClient:
    """Scores solutions with the current PRM, or the version named in `model`: (problem, steps)
    pairs, or (problem, completion) pairs the server splits into steps.

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

    def answers(self, items: Sequence[tuple[str, Sequence[str]]]) -> list[Answer]:
        """The server's answer for every (problem, steps) pair, in order: its `steps` (p, mean,
        sigma each) and its solution `score` (product, min, last, mean, sigma)."""
        return self._answers([{"problem": problem, "steps": list(steps)} for problem, steps in items])

    def completion_answers(self, items: Sequence[tuple[str, str]], *, split: str = "auto") -> list[Answer]:
        """The server's answer for every (problem, completion) pair, in order. The server cuts each
        completion into steps with the splitter its imports use, in mode `split` (`auto`,
        `blank_line`, `line` or `sentence`), and answers each step's `text` beside its scores.
        A completion must hold more than whitespace: the server refuses a blank one (400)."""
        return self._answers([{"problem": problem, "completion": completion, "split": split}
                              for problem, completion in items])

    def _answers(self, items: list[Item]) -> list[Answer]:
        batches = list(self._batches(items))
        if self.concurrency == 1 or len(batches) < 2:
            answers = [self._score_batch(batch) for batch in batches]
        else:
            with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
                answers = list(pool.map(self._score_batch, batches))
        return [item for answer in answers for item in answer]

    def _batches(self, items: list[Item]) -> Iterator[list[Item]]:
        batch: list[Item] = []
        total = 0
        for item in items:
            size = text_size(item)
            if batch and (len(batch) == self.batch_size or total + size > MAX_TOTAL_TEXT):
                yield batch
                batch, total = [], 0
            batch.append(item)
            total += size
        if batch:
            yield batch

    def _score_batch(self, batch: list[Item]) -> list[Answer]:
        body: dict[str, Any] = {"items": batch}
        if self.model:
            body["model"] = self.model
        items: list[Answer] = self._post("/api/score", body)["items"]
        if any("score" not in item for item in items):
            raise StepwiseError("the server's /api/score answer has no solution `score`: update the server")
        return items

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"Authorization": f"Token {self.token}", "Content-Type": "application/json",
                   "Accept": "application/json"}
        try:
            return post_json(self.url + path, body, headers=headers, timeout=self.timeout, policy=self.retry)
        except urllib.error.HTTPError as error:
            # A redirect's reason names where it pointed (retrying.RefuseRedirects); its body rarely does.
            detail = error.reason if 300 <= error.code < 400 else error.read().decode(errors="replace")[:2000]
            raise StepwiseError(f"POST {path} answered {error.code}: {detail}") from None
        except URLLIB_TRANSIENT as error:
            raise StepwiseError(f"POST {path} failed after {self.retry.attempts} attempts: {error}") from None
