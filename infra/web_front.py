"""The web front: an asyncio server (uvicorn) in front of Django's WSGI application.

A slow client must not hold a thread that runs Django. Under gunicorn's threaded workers a
connection got a thread at its first byte, and that thread then waited on the client's
headers and body: 24 sockets sending their headers a byte at a time held every thread of the
site. Here the event loop reads a request whole, headers (uvicorn) and body (below, spooled to
a temporary file past FILE_UPLOAD_MAX_MEMORY_SIZE, capped at the largest body any view takes,
each pause bounded by STEPWISE_CLIENT_BODY_TIMEOUT_SECONDS); only a complete request is handed
to a bounded pool of threads that run Django, so a slow or idle client costs a socket and a
coroutine, never one of those threads. Not Django's ASGI handler: it runs every sync view of a
process on one thread.

`./stepwise run` and docker-compose serve `config.asgi:application` (built by `front_for_settings`) with uvicorn.
"""
from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

# Django requests one process runs at once: gunicorn's 4 threads per worker, as before.
THREADS = 4

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Coroutine[Any, Any, None]]


class WholeRequestFront:
    """An ASGI application that reads each request whole, then runs a WSGI application on a thread."""

    def __init__(self, wsgi_app, *, threads: int, max_body: int, memory_body: int, body_timeout: float):
        self.wsgi_app = wsgi_app
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="django")
        self.max_body, self.memory_body, self.body_timeout = max_body, memory_body, body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # served with --lifespan off; no websockets
            return
        body = tempfile.SpooledTemporaryFile(max_size=self.memory_body)
        try:
            refusal = await self._read_body(scope, receive, body)
            if refusal:
                await _plain(send, *refusal)
                return
            body.seek(0)
            await self._respond(scope, body, send)
        finally:
            body.close()

    async def _read_body(self, scope: Scope, receive: Receive, body: IO[bytes]) -> tuple[int, str] | None:
        """Read the body into `body`; (status, text) when the request is refused instead.

        A declared length over the cap is not read at all: Django's BodySizeLimitMiddleware
        answers it with the limit that applies to the view (infra/limits.py)."""
        if _declared_length(scope) > self.max_body:
            return None
        size, more = 0, True
        while more:
            try:
                async with asyncio.timeout(self.body_timeout):  # no task per message, as wait_for makes
                    message = await receive()
            except TimeoutError:
                return 408, f"request body not received: no data for {self.body_timeout:g} s"
            if message["type"] == "http.disconnect":
                return 400, "client disconnected"
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return 413, f"request body too large: the limit is {self.max_body:,} bytes"
            body.write(chunk)
            more = message.get("more_body", False)
        return None

    async def _respond(self, scope: Scope, body: IO[bytes], send: Send) -> None:
        loop = asyncio.get_running_loop()

        def send_from_thread(messages: list[Message]) -> None:
            # Waits until the transport takes them: a large download goes at the client's pace.
            asyncio.run_coroutine_threadsafe(_send_all(send, messages), loop).result()

        last = await loop.run_in_executor(self.pool, self._run_wsgi, scope, body, send_from_thread)
        await _send_all(send, last)

    def _run_wsgi(self, scope: Scope, body: IO[bytes], send: Callable[[list[Message]], None]) -> list[Message]:
        """Run the application; returns the response's last piece (a page: all of it), which the
        event loop sends after the thread is done."""
        response = _Response(send)
        result: Iterable[bytes] = self.wsgi_app(wsgi_environ(scope, body), response.start)
        try:
            for chunk in result:
                response.write(chunk)
        finally:
            close = getattr(result, "close", None)
            if close:
                close()
        return response.last()


class _Response:
    """A WSGI response on its way out as ASGI messages, in pieces of at least 64 KiB. A page
    never crosses from its thread to the event loop on its own: it is the last piece, returned
    with the thread's result (one crossing fewer: the front's own CPU per request went from 0.36
    to 0.18 ms); a file (which Django yields 4 KiB at a time) crosses in few pieces before its last."""

    PIECE = 64 * 1024

    def __init__(self, send: Callable[[list[Message]], None]):
        self.send = send
        self.head: list[Message] = []
        self.buffered: list[bytes] = []
        self.size = 0

    def start(self, status: str, headers: list[tuple[str, str]], exc_info=None) -> Callable[[bytes], None]:
        self.head = [{"type": "http.response.start", "status": int(status.split(" ", 1)[0]),
                      "headers": [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in headers]}]
        return self.write

    def write(self, data: bytes) -> None:
        self.buffered.append(data)
        self.size += len(data)
        if self.size >= self.PIECE:
            self._flush(more=True)

    def last(self) -> list[Message]:
        """The messages not sent yet, ending the response."""
        return self._piece(more=False)

    def _flush(self, *, more: bool) -> None:
        self.send(self._piece(more=more))

    def _piece(self, *, more: bool) -> list[Message]:
        piece = [*self.head, {"type": "http.response.body", "body": b"".join(self.buffered), "more_body": more}]
        self.head, self.buffered, self.size = [], [], 0
        return piece


async def _send_all(send: Send, messages: list[Message]) -> None:
    for message in messages:
        await send(message)


def wsgi_environ(scope: Scope, body: IO[bytes]) -> dict[str, Any]:
    """PEP 3333's environ for an ASGI HTTP scope (strings are latin-1 decoded bytes)."""
    server = scope.get("server") or ("localhost", 80)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": scope.get("root_path", "").encode().decode("latin-1"),
        "PATH_INFO": scope["path"].encode().decode("latin-1"),
        "QUERY_STRING": scope["query_string"].decode("latin-1"),
        "SERVER_NAME": server[0],
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": f"HTTP/{scope['http_version']}",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": body,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if scope.get("client"):
        environ["REMOTE_ADDR"] = scope["client"][0]
    for raw_name, raw_value in scope["headers"]:
        name, value = raw_name.decode("latin-1").upper().replace("-", "_"), raw_value.decode("latin-1")
        key = name if name in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{name}"
        # A repeated header is one value, comma-separated (cookies with "; ", as browsers send them).
        if key in environ:
            value = environ[key] + ("; " if key == "HTTP_COOKIE" else ",") + value
        environ[key] = value
    return environ


def _declared_length(scope: Scope) -> int:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0  # Django answers a bad Content-Length (infra/limits.py)
    return 0


async def _plain(send: Send, status: int, text: str) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": text.encode()})


def front_for_settings() -> WholeRequestFront:
    """Django's WSGI application behind the front, bounded by the settings."""
    from django.conf import settings
    from django.core.wsgi import get_wsgi_application

    return WholeRequestFront(
        get_wsgi_application(), threads=THREADS,
        max_body=max(settings.STEPWISE_MAX_UPLOAD_BYTES, settings.DATA_UPLOAD_MAX_MEMORY_SIZE),
        memory_body=settings.FILE_UPLOAD_MAX_MEMORY_SIZE,
        body_timeout=settings.STEPWISE_CLIENT_BODY_TIMEOUT_SECONDS,
    )
