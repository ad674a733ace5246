"""The web server: waitress serving Django's WSGI application, bounded by its own settings.

`./stepwise run` (its `web_server` function), docker-compose and the tests start it as
``python -m infra.web_server PORT [PROCESSES] [--host HOST]``. waitress reads each request
whole on its I/O thread (headers up to ``max_request_header_size``; a body in memory up to
``inbuf_overflow``, then in a temporary file; a chunked body de-chunked and handed on with its
Content-Length) and buffers each answer the same way, so a client slow in either direction
holds a socket, never one of the threads that run Django. A connection that sends and reads
nothing for ``channel_timeout`` is closed; a header name with an underscore is dropped, so
``X_Forwarded_For`` never becomes ``HTTP_X_FORWARDED_FOR`` (infra/client_address.py).

What is ours, each because waitress cannot do it (docs/deploying.md has the figures):

- **A body limit per URL, when the headers are in.** waitress has one
  ``max_request_body_size`` for every URL: at the upload limit (256 MiB) a POST to the login
  page would be spooled whole before Django's 413 (the old front did that: 8 such POSTs
  spooled 1.2 GiB). ``Parser`` holds each request to its URL's limit (infra.limits.body_limit_for,
  which BodySizeLimitMiddleware applies too): 8 POSTs declaring 200 MiB got 413 with no
  temporary file, a chunked body gets 413 as soon as its count passes the limit.
- **400 for an HTTP/1.1 request without Host, or without a version** (RFC 9112 3.2): waitress
  hands them on, and Django would answer for the server's own name.
- **More than one process.** waitress serves from one process; under the GIL that is one
  core. ``main`` opens the socket and forks PROCESSES servers that accept on it, as before
  (2 processes x 4 threads), and stops them all when one ends or on SIGTERM / SIGINT.
- **An access-log line per request** on stdout (waitress writes none).
"""
from __future__ import annotations

import argparse
import copy
import os
import signal
import socket
import sys
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser, ParsingError
from waitress.server import create_server
from waitress.utilities import RequestEntityTooLarge

THREADS = 4  # Django requests one process runs at once
CHUNK_FRAMING = 8  # the most bytes a chunked body may take on the wire per byte it carries


def adjustments(settings) -> dict[str, Any]:
    """waitress's settings for this site, from Django's settings."""
    return {
        "threads": THREADS,
        # The largest body any URL takes; Parser holds each URL to its own (strictly below: waitress refuses at >=).
        "max_request_body_size": max(settings.STEPWISE_MAX_UPLOAD_BYTES, settings.DATA_UPLOAD_MAX_MEMORY_SIZE) + 1,
        "max_request_header_size": settings.STEPWISE_MAX_HEADER_BYTES,
        "channel_timeout": settings.STEPWISE_CLIENT_TIMEOUT_SECONDS,
        "cleanup_interval": max(1, min(30, settings.STEPWISE_CLIENT_TIMEOUT_SECONDS // 3)),
        "connection_limit": settings.STEPWISE_MAX_CONNECTIONS,
        "asyncore_use_poll": True,  # select() stops at 1,024 sockets
        "inbuf_overflow": 256 * 1024,
        "ident": "",  # no Server header
        "clear_untrusted_proxy_headers": False,  # X-Forwarded-For is the app's to judge (infra/client_address.py)
        "expose_tracebacks": False,
    }


class Parser(HTTPRequestParser):
    """waitress's request parser, holding each request to its URL's body limit and requiring Host."""

    _per_cap: dict[int, Any] = {}  # the server's adjustments with one body cap, by cap
    _limit: tuple[int, str] = (0, "")
    error: Any

    def parse_header(self, header_plus: bytes) -> None:
        super().parse_header(header_plus)
        if self.version not in ("1.0", "1.1"):
            raise ParsingError("HTTP/1.0 or HTTP/1.1 only")
        if self.version == "1.1" and "HOST" not in self.headers:
            raise ParsingError("HTTP/1.1 request without Host")
        from infra.limits import body_limit_for  # Django is set up before the first request

        self._limit = body_limit_for(self.path, self.headers.get("CONTENT_TYPE", ""))
        # waitress refuses at >= its cap, and counts a chunked body with its framing (a 1-byte chunk
        # takes 6): a chunked body gets room for that, its de-chunked length is held to the limit below.
        limit = self._limit[0]
        self.adj = self._adjustments_for(CHUNK_FRAMING * limit + 1 if self.chunked else limit + 1)

    def received(self, data: bytes) -> int:
        consumed = super().received(data)
        if self.chunked and self.body_rcv is not None and not self.error and len(self.body_rcv) > self._limit[0]:
            self.error = RequestEntityTooLarge("")
            self.completed = True
        if isinstance(self.error, RequestEntityTooLarge) and self._limit[1]:
            from infra.limits import too_large_message

            self.error = RequestEntityTooLarge(too_large_message(*self._limit))
        return consumed

    def _adjustments_for(self, cap: int):
        adjusted = self._per_cap.get(cap)
        if adjusted is None:
            adjusted = copy.copy(self.adj)
            adjusted.max_request_body_size = cap
            self._per_cap[cap] = adjusted
        return adjusted


class Channel(HTTPChannel):
    parser_class = Parser


def access_logged(application: Callable) -> Callable:
    """`application`, writing a line per request to stdout: client, request line, status."""
    out = sys.stdout

    def logged(environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        def start(status: str, headers: list, exc_info=None):
            query = environ.get("QUERY_STRING")
            out.write(f'{environ.get("REMOTE_ADDR", "-")} - "{environ["REQUEST_METHOD"]} '
                      f'{environ.get("PATH_INFO", "")}{"?" + query if query else ""} '
                      f'{environ["SERVER_PROTOCOL"]}" {status[:3]}\n')
            out.flush()
            return start_response(status, headers, exc_info)

        return application(environ, start)

    return logged


def serve(sock: socket.socket) -> None:
    """Serve the site on `sock` until SIGTERM or SIGINT; then wait up to 5 s for requests in flight."""
    import django
    from django.conf import settings
    from django.core.wsgi import get_wsgi_application

    django.setup(set_prefix=False)
    server = create_server(access_logged(get_wsgi_application()), sockets=[sock], **adjustments(settings))
    server.channel_class = Channel
    # waitress's run() closes the server on SystemExit, waiting for its threads.
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, lambda *_: sys.exit(0))
    server.run()


def main(argv: list[str]) -> int:
    """``PORT [PROCESSES] [--host HOST]``: serve until stopped; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m infra.web_server")
    parser.add_argument("port", type=int)
    parser.add_argument("processes", type=int, nargs="?", default=2)
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (compose: 0.0.0.0)")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sock = socket.create_server((args.host, args.port), backlog=1024)
    # What waitress sets on a socket it opens itself (its socket_options), and it is given this
    # one: accepted connections inherit it, so an answer sent in pieces does not wait on Nagle.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return _serve_in(sock, args.processes)


def _serve_in(sock: socket.socket, processes: int) -> int:
    sock.setblocking(False)
    if processes == 1:
        serve(sock)
        return 0
    children = []
    for _ in range(processes):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                serve(sock)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)  # never back into the parent's loop
        children.append(pid)
    sock.close()
    return _supervise(children)


def _supervise(children: list[int]) -> int:
    """Wait for a stop signal or for a server to end; then stop the rest. The exit status: the
    first server's that ended by itself, else 0."""
    def stop_all(*_) -> None:
        for child in children:
            try:
                os.kill(child, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, stop_all)
    signal.signal(signal.SIGINT, stop_all)
    status = None
    while children:
        try:
            pid, code = os.wait()
        except ChildProcessError:
            break
        children.remove(pid)
        if status is None:
            status = os.waitstatus_to_exitcode(code)
            stop_all()
    return 0 if not status else status if status > 0 else 128 - status  # killed by a signal: 128 + its number


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
