"""A PRM served elsewhere: a client of a vLLM-compatible `/pooling` endpoint. No Django (but
for the one setting `infra.outbound.check_url` reads, which checks every config's URL, and
`infra.outbound_http`, Stepwise's one outbound client, at every call).

A remote model version scores through this instead of local weights, with the same
interface as a loaded model (`step_probabilities`, `score_counting_tokens`), so scoring,
rescoring and `/api/score` do not know the difference. The worker only orchestrates: texts
go out, per-step probabilities come back, nothing is loaded.

The protocol is vLLM's, as its docs and source describe it (docs.vllm.ai, "Pooling Models"
and `vllm/entrypoints/pooling/pooling/protocol.py`; the STEP pooler in
`vllm/model_executor/layers/pooler/tokwise/methods.py`): a server started with
`vllm serve MODEL --runner pooling --pooler-config '{"pooling_type": "STEP",
"step_tag_id": T, "returned_token_ids": [A, B]}'` answers

    POST /pooling {"model": M, "input": [text, ...], "task": "token_classify", "encoding_format": "float"}
    -> {"id": "pool-…", "object": "list", "created": …, "model": M,
        "data": [{"index": i, "object": "pooling", "data": [[p_A, p_B], ...]}, ...],
        "usage": {"prompt_tokens": n, "total_tokens": n}}

with one row per occurrence of token T in input i (the step tag), each row the softmax over
the returned token ids (or the classifier's labels). Each text is built exactly as local
scoring builds it (`step_scores.build_input`): the problem, then each step followed by the
separator, which must end in the step tag. `positive_index` says which entry of a row is
P(step is good): 0 for Math-Shepherd's `[+, -]`, 1 for a 2-label classifier (Qwen2.5-Math-PRM).
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields

import httpx2 as httpx  # the HTTP client openai 3 is built on; infra.outbound_http's

from infra import outbound, outbound_http
from scoring.core.step_scores import StepProbability, build_input

# The retry policy's owner is the standalone client package (standard library only).
from stepwise_client.retrying import RetryPolicy, is_retryable_status, retry_after_seconds

# The fields that decide what a remote version computes: its fingerprint (weights_sha256).
IDENTITY_FIELDS = ("url", "served_model", "separator", "positive_index")
# The largest answer read, unless a version's config says otherwise (`max_answer_bytes`): a batch
# of 16 solutions of 200 steps each is about 150 kB of JSON.
MAX_ANSWER_BYTES = 16 * 2**20
# What is read of an error answer (its message), whatever its size.
MAX_ERROR_BYTES = 64 * 1024


class RemoteScoringError(RuntimeError):
    """The endpoint could not be used: unreachable, refusing, or answering off-protocol."""


class _StatusError(Exception):
    """An answer with a status of 300 or more, as far as its message was read."""

    def __init__(self, response: httpx.Response, message: str):
        super().__init__(message)
        self.status, self.message, self.headers = response.status_code, message, response.headers


@dataclass(frozen=True)
class RemoteConfig:
    """Where a remote PRM is and how to read it; stored as a ModelVersion's config."""

    url: str  # the server's base URL; requests go to URL/pooling
    served_model: str  # the name the server serves the model under ("model" in requests)
    separator: str  # appended after each step; ends in the step tag the server pools at
    positive_index: int = 1  # entry of each step's row that is P(good)
    api_key_env: str = ""  # environment variable holding the bearer token, if the server wants one
    concurrency: int = 4  # requests in flight at once, per scoring call
    timeout: float = 60.0  # seconds per request, all of it: connecting, sending, reading the whole answer
    retries: int = 3  # further attempts after a 408/409/429/5xx/timeout/connection error
    backoff: float = 0.5  # bound of the first retry's jittered wait, doubled each time
    batch_size: int = 16  # solutions per request
    max_answer_bytes: int = MAX_ANSWER_BYTES  # a larger answer fails the request, unread

    @classmethod
    def from_dict(cls, config: dict) -> RemoteConfig:
        """Build and check a config; a bad value raises ValueError naming its field."""
        if not isinstance(config, dict):
            raise ValueError("a remote model's config must be a JSON object")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(config) - set(known) - {"kind"})
        if unknown:
            raise ValueError(f"unknown field(s) {', '.join(unknown)}; known: {', '.join(known)}")
        for name in ("url", "served_model", "separator"):
            if not isinstance(config.get(name), str) or not config[name]:
                raise ValueError(f"'{name}' must be a non-empty string")
        try:
            outbound.check_url(config["url"])
        except ValueError as error:
            raise ValueError(f"'url': {error}") from None
        values = {name: config[name] for name in known if name in config}
        for name, minimum in (("positive_index", 0), ("concurrency", 1), ("retries", 0), ("batch_size", 1),
                              ("max_answer_bytes", 1)):
            if name in values and (not isinstance(values[name], int) or values[name] < minimum):
                raise ValueError(f"'{name}' must be an integer >= {minimum}, not {values[name]!r}")
        for name, least in (("timeout", 0.001), ("backoff", 0.0)):
            if name in values and (not isinstance(values[name], int | float) or values[name] < least):
                raise ValueError(f"'{name}' must be a number of seconds >= {least:g}, not {values[name]!r}")
        if not isinstance(values.get("api_key_env", ""), str):
            raise ValueError("'api_key_env' must be the name of an environment variable")
        return cls(**{**values, "url": config["url"].rstrip("/")})

    def to_dict(self) -> dict:
        return {"kind": "remote", **asdict(self)}

    def fingerprint(self) -> str:
        """sha256 of what decides the scores (not of tuning such as concurrency)."""
        identity = {name: getattr(self, name) for name in IDENTITY_FIELDS}
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()

    @property
    def endpoint(self) -> str:
        return f"{self.url}/pooling"


class RemotePRM:
    """Scores (problem, steps) items at a /pooling endpoint, in batches, with bounded concurrency."""

    kind = "remote"

    def __init__(self, config: RemoteConfig):
        self.config = config
        self.requests_sent = 0  # attempts, retries included (tests and benchmarks read it)
        self._http = outbound_http.client(seconds=config.timeout, max_bytes=config.max_answer_bytes)

    @property
    def separator(self) -> str:
        return self.config.separator

    def step_probabilities(self, items: Sequence[tuple[str, Sequence[str]]]) -> list:
        """Per-step StepProbability lists, one per item, in order."""
        return self.score_counting_tokens(items)[0]

    def score_counting_tokens(self, items: Sequence[tuple[str, Sequence[str]]]) -> tuple[list, int]:
        """(per-step probabilities per item, prompt tokens the server reports having read)."""
        texts = ["".join(build_input(problem, steps, separator=self.separator)) for problem, steps in items]
        size = self.config.batch_size
        batches = [(start, texts[start : start + size]) for start in range(0, len(texts), size)]
        if not batches:
            return [], 0
        with ThreadPoolExecutor(max_workers=min(self.config.concurrency, len(batches))) as pool:
            answers = list(pool.map(lambda batch: self._score_batch(*batch, items=items), batches))
        return [steps for results, _ in answers for steps in results], sum(tokens for _, tokens in answers)

    def _score_batch(self, start: int, texts: list[str], *, items) -> tuple[list, int]:
        body = {"model": self.config.served_model, "input": texts, "task": "token_classify",
                "encoding_format": "float"}
        answer = self.post(body)
        rows_per_text = parse_pooling_response(answer, expected=len(texts), where=self.config.endpoint)
        results = [
            self._read_steps(rows, n_steps=len(items[start + offset][1]), item=start + offset)
            for offset, rows in enumerate(rows_per_text)
        ]
        usage = answer.get("usage") or {}
        return results, int(usage.get("prompt_tokens") or 0)

    def _read_steps(self, rows: list, *, n_steps: int, item: int) -> list:
        if len(rows) != n_steps:
            raise RemoteScoringError(
                f"{self.config.endpoint}: item {item} has {n_steps} steps but the server returned {len(rows)} "
                f"step outputs; the separator {self.separator!r} must hold the server's step tag token "
                f"(step_tag_id) exactly once, and no step's text may hold it"
            )
        index = self.config.positive_index
        probabilities = []
        for row in rows:
            value = row[index] if isinstance(row, list) and len(row) > index else None
            if not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
                raise RemoteScoringError(
                    f"{self.config.endpoint}: item {item}: step output {row!r} has no probability at "
                    f"positive_index {index} (is the server applying the softmax?)"
                )
            probabilities.append(StepProbability(p=float(value)))
        return probabilities

    def post(self, body: dict) -> dict:
        """POST JSON, retried as `stepwise_client.retrying` decides (busy or failing server, lost connection).

        Each attempt is bounded by the outbound client: `timeout` seconds for the whole exchange
        (a server that sends a byte now and then is cut off all the same), `max_answer_bytes`
        for its answer; its URL is checked as it is sent, and a redirect is not followed.
        """
        policy = RetryPolicy(retries=self.config.retries, backoff=self.config.backoff)
        where, after = f"POST {self.config.endpoint}", f"(after {policy.attempts} attempts)"
        data, headers = json.dumps(body).encode(), self._headers()

        def attempt() -> dict:
            self._count_request()
            return json.loads(self._exchange(data, headers))

        try:
            return policy.call(attempt, retryable=_retryable, retry_after=_retry_after)
        except _StatusError as error:
            tries = f" {after}" if is_retryable_status(error.status) else ""
            raise RemoteScoringError(f"{where}: HTTP {error.status}: {error.message}{tries}") from None
        except outbound_http.AnswerTooLarge:
            raise RemoteScoringError(
                f"{self.config.endpoint}: the answer is larger than max_answer_bytes "
                f"({self.config.max_answer_bytes:,} bytes); is this a /pooling server? (raise max_answer_bytes "
                "in the version's config if it is)"
            ) from None
        except (outbound_http.Refused, outbound_http.AnswerRefused) as error:
            raise RemoteScoringError(f"{where}: {error}") from None
        except httpx.TimeoutException:
            raise RemoteScoringError(f"{where}: timed out {after}") from None
        except httpx.TransportError as error:
            raise RemoteScoringError(f"{where}: cannot connect ({error}) {after}") from None
        except json.JSONDecodeError:
            raise RemoteScoringError(f"{where}: the answer is not JSON") from None

    def _count_request(self) -> None:
        self.requests_sent += 1

    def _exchange(self, data: bytes, headers: dict) -> bytes:
        """One POST's answer body; _StatusError for a status of 300 or more, with the error's message
        read from at most MAX_ERROR_BYTES of it."""
        with self._http.stream("POST", self.config.endpoint, content=data, headers=headers) as response:
            if response.status_code >= 300:
                raise _StatusError(response, _error_message(response))
            return response.read()

    def _headers(self) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.config.api_key_env:
            key = os.environ.get(self.config.api_key_env)
            if not key:
                raise RemoteScoringError(
                    f"{self.config.api_key_env} is not set: it holds the API key for {self.config.url}"
                )
            headers["Authorization"] = f"Bearer {key}"
        return headers


def parse_pooling_response(answer: dict, *, expected: int, where: str) -> list[list]:
    """The per-input lists of step rows of a /pooling answer, in input order (by `index`)."""
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list) or len(data) != expected:
        got = len(data) if isinstance(data, list) else "no"
        raise RemoteScoringError(f"{where}: expected 'data' with {expected} entries, got {got}")
    by_index = {}
    for entry in data:
        if not isinstance(entry, dict) or not isinstance(entry.get("data"), list):
            raise RemoteScoringError(f"{where}: a 'data' entry has no 'data' list: {str(entry)[:200]}")
        by_index[str(entry.get("index"))] = entry["data"]
    if set(by_index) != {str(i) for i in range(expected)}:
        raise RemoteScoringError(f"{where}: 'data' indices {sorted(by_index)} are not 0..{expected - 1}")
    return [by_index[str(i)] for i in range(expected)]


def _retryable(error: Exception) -> bool:
    if isinstance(error, _StatusError):
        return is_retryable_status(error.status)
    return outbound_http.transient(error)


def _retry_after(error: Exception) -> float | None:
    return retry_after_seconds(error.headers.get("retry-after")) if isinstance(error, _StatusError) else None


def _error_message(response: httpx.Response) -> str:
    if 300 <= response.status_code < 400:
        return f"{outbound_http.not_followed(response)} (register the URL it names)"
    read = b""
    for chunk in response.iter_raw():
        read += chunk
        if len(read) >= MAX_ERROR_BYTES:
            break
    try:
        body = json.loads(read[:MAX_ERROR_BYTES] or b"{}")
    except ValueError:  # not JSON, or cut inside a character
        return response.reason_phrase
    detail = body.get("error", body) if isinstance(body, dict) else body
    return str(detail.get("message", detail) if isinstance(detail, dict) else detail)[:300]
