"""Slow clients cannot starve the site: `./stepwise run`'s web server (the script's own
`web_server` function, started by sourcing the script) keeps answering logins and next-task
claims while 64 sockets send their headers a byte at a time (slowloris) and 64 more send a
request body the same way.

The hostile sockets stay open for the whole measurement (checked at the end): each holds what
a connection holds on the server, and the site must not care. Below, the front itself
(infra/web_front.py) with a WSGI application of the test's own: whole bodies in, a stalled body
408, an oversize one 413, answers in few pieces.
"""
import asyncio
import socket
import threading
import time

import pytest

from annotate.labeling import queueing
from annotate.models import LabelingConfig
from bench.loadtest import NEXT, Annotator, Server, percentile
from infra.web_front import WholeRequestFront
from tests.conftest import _test_database_url
from tests.factories import SolutionFactory, user_with_role
from tests.load import page_bound_under_load

HOSTILE = 64
PASSWORD = "pass-for-tests"


class SlowSockets:
    """Sockets that each send a request one byte per interval and never finish it."""

    def __init__(self, port: int, head: bytes, count: int, interval: float = 1.0):
        self.sockets = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(count)]
        for sock in self.sockets:
            sock.sendall(head)
        self.interval, self.stopped = interval, threading.Event()
        self.thread = threading.Thread(target=self._trickle, daemon=True)
        self.thread.start()

    def _trickle(self) -> None:
        while not self.stopped.wait(self.interval):
            for sock in self.sockets:
                try:
                    sock.send(b"a")
                except OSError:
                    pass  # closed by the server: counted by still_open()

    def still_open(self) -> int:
        """How many the server has not closed: a closed socket reads as readable, with b"" or an answer."""
        open_now = 0
        for sock in self.sockets:
            sock.setblocking(False)
            try:
                sock.recv(1, socket.MSG_PEEK)  # an answer, or b"" for a close: no longer held
            except BlockingIOError:
                open_now += 1  # nothing to read: still waiting for the rest of our request
            except OSError:
                pass
        return open_now

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        for sock in self.sockets:
            sock.close()


@pytest.fixture
def web_server(transactional_db, tmp_path):
    """The server exactly as `./stepwise run` starts it (loadtest.Server: the script's web_server),
    on the test database, its access log in a file."""
    log = tmp_path / "web.log"
    server = Server(database_url=_test_database_url(), log=log)
    try:
        server.wait_until_up(90)
        yield server.port, log
    finally:
        server.stop()


@pytest.fixture
def work_to_claim(transactional_db):
    LabelingConfig.objects.update_or_create(pk=LabelingConfig.get().pk,
                                            defaults={"qc_rate": 0, "screening_required": False})
    for _ in range(60):
        SolutionFactory()
    queueing.ensure_default_queue()
    return [user_with_role(f"patient{i}", "annotator") for i in range(8)]


def timed_logins_and_claims(base: str, usernames: list[str], seconds: float) -> tuple[list[float], list[float]]:
    """Log in as each annotator in turn and claim tasks, for about `seconds`: (login ms, next-task ms)."""
    logins, claims = [], []
    deadline = time.monotonic() + seconds
    for username in usernames * 10:
        if time.monotonic() > deadline and len(logins) >= len(usernames):
            break
        annotator = Annotator(base, username, PASSWORD, deadline=float("inf"), max_requests=100)
        started = time.perf_counter()
        annotator.log_in()
        logins.append((time.perf_counter() - started) * 1000)
        for _ in range(3):
            annotator._claim()
        claims.extend(annotator.result.timings[NEXT])
        annotator.http.close()
    return logins, claims


@pytest.mark.postgresql
def test_login_and_next_task_stay_fast_while_128_slow_clients_hold_connections(web_server, work_to_claim):
    port, log = web_server
    base = f"http://127.0.0.1:{port}"
    usernames = [user.username for user in work_to_claim]
    # Each server process loads templates and opens its database connection on its first
    # requests: measured is the site after that, as users meet it, beside its pages alone.
    timed_logins_and_claims(base, usernames[:4], seconds=0)
    logins_alone, claims_alone = timed_logins_and_claims(base, usernames[4:], seconds=0)
    slow_headers = SlowSockets(port, b"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ", HOSTILE)
    slow_bodies = SlowSockets(port, b"POST /label/next HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                    b"Content-Type: application/x-www-form-urlencoded\r\n"
                                    b"Content-Length: 100000\r\n\r\nnote=", HOSTILE)
    try:
        time.sleep(2)  # every hostile request has reached the server and is being trickled
        logins, claims = timed_logins_and_claims(base, usernames, seconds=12)
        open_headers, open_bodies = slow_headers.still_open(), slow_bodies.still_open()
    finally:
        slow_headers.close()
        slow_bodies.close()
    assert (open_headers, open_bodies) == (HOSTILE, HOSTILE), "the hostile sockets were not held throughout"
    assert len(claims) >= 3 * len(usernames)
    login_p95, claim_p95 = percentile(logins, 95), percentile(claims, 95)
    login_alone, claim_alone = percentile(logins_alone, 95), percentile(claims_alone, 95)
    assert (login_p95 < 1000 * page_bound_under_load(login_alone / 1000)
            and claim_p95 < 1000 * page_bound_under_load(claim_alone / 1000)), (
        f"login p95 {login_p95:.0f} ms (alone {login_alone:.0f}), next task p95 {claim_p95:.0f} ms "
        f"(alone {claim_alone:.0f})\n{log.read_text()[-2000:]}")
    assert '"POST /label/next HTTP/1.1" 200' in log.read_text()  # the access log names each request


# --- the front itself (infra/web_front.py), with a WSGI application of the test's own --------------

def echo_app(environ, start_response):
    """Answers with the body it was given, 4 KiB at a time as Django's FileResponse yields a file."""
    body = environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "application/octet-stream"), ("X-Length", str(len(body)))])
    return [body[i:i + 4096] for i in range(0, len(body), 4096)]


def serve(front, chunks: list[bytes], *, stall: bool = False, declared: int | None = None):
    """One request through `front` as uvicorn would pass it; returns the messages sent back."""
    headers = [(b"content-length", str(declared if declared is not None else sum(map(len, chunks))).encode())]
    scope = {"type": "http", "method": "POST", "path": "/", "query_string": b"", "headers": headers,
             "http_version": "1.1", "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5000)}
    incoming = [{"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1 or stall}
                for i, chunk in enumerate(chunks)]
    sent = []

    async def receive():
        if incoming:
            return incoming.pop(0)
        await asyncio.sleep(3600)  # a client that stopped sending

    async def send(message):
        sent.append(message)

    # On a thread of its own: a test run that drove a browser before may hold an event loop on this one.
    failure: list[BaseException] = []
    runner = threading.Thread(target=lambda: _run_catching(front(scope, receive, send), failure))
    runner.start()
    runner.join()
    if failure:
        raise failure[0]
    return sent


def _run_catching(coroutine, failure: list[BaseException]) -> None:
    try:
        asyncio.run(coroutine)
    except BaseException as error:  # handed to the test's thread
        failure.append(error)


def front(**limits) -> WholeRequestFront:
    return WholeRequestFront(echo_app, **{"threads": 2, "max_body": 1 << 20, "memory_body": 1024,
                                          "body_timeout": 0.5, **limits})


def test_the_front_passes_a_body_whole_and_answers_in_few_large_pieces():
    body = bytes(range(256)) * 1000  # 256,000 bytes: past the memory limit, so spooled to a file
    sent = serve(front(), [body[:100_000], body[100_000:]])
    start, *pieces = sent
    assert start["status"] == 200 and (b"x-length", b"256000") in start["headers"]
    assert b"".join(piece["body"] for piece in pieces) == body
    assert len(pieces) <= 5 and pieces[-1]["more_body"] is False  # 63 chunks of 4 KiB, sent as a few


def test_a_body_that_stops_arriving_gets_408_and_never_reaches_the_application():
    sent = serve(front(body_timeout=0.3), [b"half of a"], stall=True)
    assert sent[0]["status"] == 408 and b"no data for 0.3 s" in sent[1]["body"]


def test_a_body_over_the_cap_gets_413_and_a_declared_one_is_left_unread_for_django():
    assert serve(front(max_body=1000), [b"x" * 600, b"x" * 600], declared=0)[0]["status"] == 413
    # Declared over the cap: nothing is read; the application answers (Django's own limit, with its message).
    unread = serve(front(max_body=1000), [], stall=True, declared=5000)
    assert unread[0]["status"] == 200 and (b"x-length", b"0") in unread[0]["headers"]
