"""A PRM served elsewhere: a client of a vLLM-compatible `/pooling` endpoint. No Django (but
for the one setting `infra.outbound.check_url` reads, which checks every config's URL).

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
import http.client
import io
import json
import os
import socket
import threading
import urllib.error
import urllib.parse
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields

from infra import outbound
from scoring.core.step_scores import StepProbability, build_input

# The retry policy's owner is the standalone client package (standard library only, like this module).
from stepwise_client.retrying import URLLIB_TRANSIENT, RetryPolicy, urllib_retry_after, urllib_retryable

# The fields that decide what a remote version computes: its fingerprint (weights_sha256).
IDENTITY_FIELDS = ("url", "served_model", "separator", "positive_index")
# The largest answer read, unless a version's config says otherwise (`max_answer_bytes`): a batch
# of 16 solutions of 200 steps each is about 150 kB of JSON.
MAX_ANSWER_BYTES = 16 * 2**20
# What is read of an error answer (its message), whatever its size.
MAX_ERROR_BYTES = 64 * 1024
_CHUNK = 64 * 1024


class RemoteScoringError(RuntimeError):
    """The endpoint could not be used: unreachable, refusing, or answering off-protocol."""


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

        Each attempt is bounded: `timeout` seconds for the whole exchange (a server that sends
        a byte now and then is cut off all the same), `max_answer_bytes` for its answer.
        """
        policy = RetryPolicy(retries=self.config.retries, backoff=self.config.backoff)
        where, after = f"POST {self.config.endpoint}", f"(after {policy.attempts} attempts)"
        data, headers = json.dumps(body).encode(), self._headers()

        def attempt() -> dict:
            self._count_request()
            return json.loads(self._exchange(data, headers))

        try:
            return policy.call(attempt, retryable=urllib_retryable, retry_after=urllib_retry_after)
        except urllib.error.HTTPError as error:
            tries = f" {after}" if urllib_retryable(error) else ""
            raise RemoteScoringError(f"{where}: HTTP {error.code}: {_error_message(error)}{tries}") from None
        except URLLIB_TRANSIENT as error:
            raise RemoteScoringError(f"{where}: {_connection_problem(error)} {after}") from None
        except json.JSONDecodeError:
            raise RemoteScoringError(f"{where}: the answer is not JSON") from None

    def _count_request(self) -> None:
        self.requests_sent += 1

    def _exchange(self, data: bytes, headers: dict) -> bytes:
        """One POST's answer body. Fails as urllib would (HTTPError for a status of 300 or more,
        URLError for a connection that failed or ran past the deadline), so that the retry
        policy and the messages read it the same; RemoteScoringError for an answer too large.

        http.client rather than urllib: the deadline needs the connection's socket, to cut it;
        and it follows no redirect, so the key goes to the checked URL's server only.
        """
        url = urllib.parse.urlsplit(self.config.endpoint)
        kind: type[http.client.HTTPConnection] = (
            http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        )
        connection = kind(url.hostname or "", url.port, timeout=self.config.timeout)
        deadline = _Deadline(self.config.timeout)
        response = None
        try:
            connection.connect()  # bounded by the connection's timeout, the deadline's length
            deadline.watch(connection.sock)
            connection.request("POST", url.path, body=data, headers=headers)
            response = connection.getresponse()
            if response.status >= 300:
                message = response.read(MAX_ERROR_BYTES)
                deadline.check()
                raise urllib.error.HTTPError(self.config.endpoint, response.status, response.reason,
                                             response.headers, io.BytesIO(message))
            answer = self._read_answer(response)
            deadline.check()
            return answer
        except urllib.error.HTTPError:
            raise
        except (OSError, http.client.HTTPException) as error:
            if deadline.passed or isinstance(error, TimeoutError):
                raise urllib.error.URLError(TimeoutError(f"no whole answer within {self.config.timeout:g} s")) from None
            if isinstance(error, http.client.HTTPException | ConnectionError):
                raise  # a lost connection, retried as it is
            raise urllib.error.URLError(error) from None  # as urllib words what failed to connect
        finally:
            deadline.cancel()
            if response is not None:
                response.close()  # the connection has let go of its socket when the answer ends it
            connection.close()

    def _read_answer(self, response: http.client.HTTPResponse) -> bytes:
        limit = self.config.max_answer_bytes
        too_large = RemoteScoringError(
            f"{self.config.endpoint}: the answer is larger than max_answer_bytes ({limit:,} bytes); "
            f"is this a /pooling server? (raise max_answer_bytes in the version's config if it is)"
        )
        declared = response.getheader("Content-Length") or ""
        if declared.isdigit() and int(declared) > limit:
            raise too_large
        chunks, size = [], 0
        while chunk := response.read(_CHUNK):
            size += len(chunk)
            if size > limit:
                raise too_large
            chunks.append(chunk)
        return b"".join(chunks)

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


class _Deadline:
    """Cuts a connection `seconds` after it began. Its socket's timeout bounds each read only;
    a server that sends a byte now and then, answer or headers, would hold the worker forever."""

    def __init__(self, seconds: float):
        self.passed = False
        self._sock: socket.socket | None = None
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock: socket.socket) -> None:
        """Cut this socket at the deadline. The socket itself, not the connection's attribute: the
        connection lets go of it once an answer that ends with the connection has begun."""
        self._sock = sock
        self.check()  # the deadline may have passed before there was a socket to cut

    def _cut(self) -> None:
        self.passed = True
        sock = self._sock
        if sock is not None:
            try:
                # The plain socket's shutdown, also under TLS: the blocked read returns at once.
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass  # closed already

    def check(self) -> None:
        if self.passed:
            raise TimeoutError("past the deadline")

    def cancel(self) -> None:
        self._timer.cancel()


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


def _error_message(error: urllib.error.HTTPError) -> str:
    if 300 <= error.code < 400:
        # Never followed: the URL was checked, where it points was not, and the key would go along.
        location = error.headers.get("Location") if error.headers else None
        return f"a redirect to {location or 'nowhere named'}, not followed (register the URL it names)"
    try:
        body = json.loads(error.read() or b"{}")
    except (json.JSONDecodeError, OSError):
        return error.reason or ""
    detail = body.get("error", body) if isinstance(body, dict) else body
    return str(detail.get("message", detail) if isinstance(detail, dict) else detail)[:300]


def _connection_problem(error: Exception) -> str:
    reason = getattr(error, "reason", None) or error
    if isinstance(reason, TimeoutError) or "timed out" in str(reason):
        return "timed out"
    return f"cannot connect ({reason})"
