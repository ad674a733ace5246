"""The one HTTP client for calls to servers an admin named: generators and remote scorers.

`client(seconds=..., max_bytes=...)` is an httpx client (the httpx2 the `openai` package is
built on; no other dependency) with the outbound rules built in, for every request it sends:

- the URL passes `infra.outbound.check_url` at send time, so a stored URL whose host is no
  longer allowed is refused when called, not only when it was saved (`Refused`, a ValueError);
- no redirect is followed, whatever the caller asks: a 3xx comes back as the answer it is, and
  `not_followed(response)` words it, naming the Location;
- the whole exchange (waiting for a connection, connecting, sending, headers, body) ends within
  `seconds`: every socket operation waits no longer than what is left (httpx.ReadTimeout and
  friends past it). httpx's own timeouts bound each read, so a server sending a byte every
  0.1 s would hold a worker for ever;
- an answer over `max_bytes` is refused (`AnswerTooLarge`), by its Content-Length before any
  of it is read, else as it arrives. Answers come uncompressed (`Accept-Encoding: identity`)
  and one compressed all the same is refused: decoded, its size would be unbounded.

Past a bound the request fails as an httpx.RequestError, which the `openai` client wraps in
APIConnectionError like any failed connection. `transient(error)` says which failures another
try may mend. Django only for the setting `check_url` reads.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import ssl
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpcore2 as httpcore  # the transport under httpx2, installed with it
import httpx2 as httpx

from infra import outbound

# httpx's defaults (httpx.HTTPTransport's), spelled out because the pool is built here.
MAX_CONNECTIONS, MAX_KEEPALIVE, KEEPALIVE_SECONDS = 100, 20, 5.0


class Refused(ValueError):
    """A request whose URL `infra.outbound` refuses at the moment of sending."""


class AnswerRefused(httpx.RequestError):
    """An answer the client will not read; another try would get the same (not `transient`)."""


class AnswerTooLarge(AnswerRefused):
    """An answer over the client's `max_bytes`."""


def client(*, seconds: float, max_bytes: int) -> httpx.Client:
    """An httpx client whose every request is checked, never redirected, done within `seconds`
    and answered in at most `max_bytes` (see the module's docstring). Thread-safe."""
    transport = _Transport(seconds=seconds, max_bytes=max_bytes)
    return _Client(transport=transport, timeout=seconds, follow_redirects=False)


def transient(error: BaseException) -> bool:
    """A failure another try may mend: a connection refused or lost, a timeout, the deadline.
    Not a refused URL or answer, nor an HTTP status (the caller's retry policy reads those)."""
    return isinstance(error, httpx.TransportError)


def not_followed(response: httpx.Response) -> str:
    """What a 3xx answer says, for the caller's error: where it pointed, and that it was not followed
    (the URL was checked, where it points was not, and the key would go along)."""
    return f"a redirect to {response.headers.get('location') or 'nowhere named'}, not followed"


class _Client(httpx.Client):
    def send(self, request: httpx.Request, *, stream: bool = False, auth: Any = httpx.USE_CLIENT_DEFAULT,
             follow_redirects: Any = httpx.USE_CLIENT_DEFAULT) -> httpx.Response:
        # Whatever a caller passes (openai passes its own option through): never followed.
        return super().send(request, stream=stream, auth=auth, follow_redirects=False)

    def __del__(self) -> None:
        # As openai's own client does: its pooled sockets close with it, not at interpreter exit.
        with contextlib.suppress(Exception):
            self.close()


@dataclass(frozen=True)
class _Deadline:
    at: float  # time.monotonic() by which the exchange is over
    seconds: float

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """Socket operations in this thread, meanwhile, wait no longer than the deadline leaves."""
        token = _DEADLINE.set(self)
        try:
            yield
        finally:
            _DEADLINE.reset(token)

    def left(self, timeout: float | None, expired: type[Exception]) -> float:
        remaining = self.at - time.monotonic()
        if remaining <= 0:
            raise expired(f"no whole answer within {self.seconds:g} s")
        return remaining if timeout is None else min(timeout, remaining)


# The deadline of the request this thread is exchanging, if any. The sync transport does every
# socket operation of a request in the caller's thread, so the connection it happens to get
# from the pool (fresh or kept alive) reads the deadline of the request it serves now.
_DEADLINE: contextvars.ContextVar[_Deadline | None] = contextvars.ContextVar("outbound_deadline", default=None)


def _bounded(timeout: float | None, expired: type[Exception]) -> float | None:
    deadline = _DEADLINE.get()
    return timeout if deadline is None else deadline.left(timeout, expired)


class _Transport(httpx.HTTPTransport):
    """httpx's transport over a connection pool whose sockets keep the deadline.

    httpx.HTTPTransport builds its pool with httpcore's default network backend and takes no
    other, so the pool is built here (its `_pool`, all that HTTPTransport's __init__ sets) with
    `_DeadlineBackend`; requests, answers and errors are then httpx's own.
    """

    def __init__(self, *, seconds: float, max_bytes: int):  # no super().__init__(): it only builds a pool
        self.seconds, self.max_bytes = seconds, max_bytes
        self._pool = httpcore.ConnectionPool(
            ssl_context=_ssl_context(), network_backend=_DeadlineBackend(), max_connections=MAX_CONNECTIONS,
            max_keepalive_connections=MAX_KEEPALIVE, keepalive_expiry=KEEPALIVE_SECONDS)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            outbound.check_url(str(request.url))
        except ValueError as error:
            raise Refused(str(error)) from None
        request.headers["Accept-Encoding"] = "identity"
        deadline = _Deadline(time.monotonic() + self.seconds, self.seconds)
        with deadline.applied():
            response = super().handle_request(request)
        try:
            self._check_headers(response, request)
        except AnswerRefused:
            response.close()
            raise
        stream = _BoundedStream(response.stream, deadline=deadline, max_bytes=self.max_bytes, request=request)
        return httpx.Response(status_code=response.status_code, headers=response.headers, stream=stream,
                              extensions=response.extensions, request=request)

    def _check_headers(self, response: httpx.Response, request: httpx.Request) -> None:
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise AnswerRefused(f"the answer is compressed ({encoding}) though none was asked for: decoded, "
                                "its size is unbounded", request=request)
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            raise AnswerTooLarge(f"the answer is larger than {self.max_bytes:,} bytes", request=request)


class _BoundedStream(httpx.SyncByteStream):
    """The answer's body, read under its request's deadline and refused past `max_bytes`."""

    def __init__(self, inner: Any, *, deadline: _Deadline, max_bytes: int, request: httpx.Request):
        self.inner, self.deadline, self.max_bytes, self.request = inner, deadline, max_bytes, request

    def __iter__(self) -> Iterator[bytes]:
        chunks, size = iter(self.inner), 0
        while True:
            with self.deadline.applied():
                chunk = next(chunks, None)
            if chunk is None:
                return
            size += len(chunk)
            if size > self.max_bytes:
                raise AnswerTooLarge(f"the answer is larger than {self.max_bytes:,} bytes", request=self.request)
            yield chunk

    def close(self) -> None:
        self.inner.close()


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's sync backend, each connect, TLS handshake, read and write bounded by the deadline."""

    def __init__(self) -> None:
        self.inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        timeout = _bounded(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self.inner.connect_tcp(host, port, timeout, local_address, socket_options))

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream):
        self.inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        timeout = _bounded(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self.inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """httpx's default (certifi's roots), built once: it takes 25-50 ms, and a context is shareable."""
    return httpx.create_ssl_context()
