"""One outbound HTTP client (infra.outbound_http): the generator and the remote scorer both call
servers through it, so each bound holds for both, checked here against servers that misbehave:
a URL no longer allowed, an answer trickled a byte at a time, too large, or compressed unasked."""
from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Callable

import openai
import pytest

from infra import outbound_http
from scoring.generation.generators import SamplingParams
from scoring.generation.openai_generator import OpenAIGenerator
from scoring.store.remote_scorer import RemoteConfig, RemotePRM, RemoteScoringError

Answer = Callable[[socket.socket], bool]  # writes one answer; False ends the connection


class RawServer:
    """HTTP/1.1 on loopback, by hand so that it can misbehave: `answer` writes every answer.
    Counts connections and requests, keeps each request's headers; bounded by `stop`."""

    def __init__(self, answer: Answer):
        self.answer, self.connections, self.requests, self.headers = answer, 0, 0, []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.stop = threading.Event()

    def __enter__(self) -> RawServer:
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.listener.close()

    def _serve(self) -> None:
        self.listener.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            try:
                while not self.stop.is_set() and self._read_request(conn):
                    self.requests += 1
                    if not self.answer(conn):
                        return
            except OSError:
                pass  # the client hung up: what a bounded client does

    def _read_request(self, conn: socket.socket) -> bool:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
        self.headers.append({name.lower(): value for name, value in headers.items()})
        while len(body) < int(self.headers[-1].get("content-length", 0)):
            chunk = conn.recv(65536)
            if not chunk:
                return False
            body += chunk
        return True


def trickled_headers(conn: socket.socket) -> bool:
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100:  # 10 s at most
        conn.sendall(bytes([byte]))
        time.sleep(0.1)
    return False


def trickled_body(conn: socket.socket) -> bool:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    for _ in range(100):  # JSON's whitespace, never over
        conn.sendall(b" ")
        time.sleep(0.1)
    return False


def declared_huge(conn: socket.socket) -> bool:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % 10**10 + b" " * 1024)
    return False


def streamed_huge(conn: socket.socket) -> bool:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
    for _ in range(640):  # 40 MiB: over the generator's 32 MiB and the remote scorer's 16 MiB
        conn.sendall(b" " * 65536)
    return False


def compressed(conn: socket.socket) -> bool:
    body = gzip.compress(b"{" + b" " * 10**6 + b"}")  # 1 MB once decoded, 1 kB as sent
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return False


# The two callers of servers an admin named, set up for `url` (retrying twice at once), then called.
def remote_scorer(url: str, *, timeout: float = 30.0) -> Callable[[], object]:
    config = {"url": url, "served_model": "m", "separator": "\n\n", "retries": 2, "backoff": 0, "timeout": timeout}
    prm = RemotePRM(RemoteConfig.from_dict(config))
    return lambda: prm.step_probabilities([("What is 2 + 3?", ["2 + 3 = 5."])])


def openai_generator(url: str, *, timeout: float = 30.0) -> Callable[[], object]:
    generator = OpenAIGenerator(f"{url}/v1", "m", max_retries=2, backoff_seconds=0, concurrency=1, timeout=timeout)
    return lambda: generator.generate(["What is 2 + 3?"], SamplingParams(max_tokens=2))


CALLERS = [remote_scorer, openai_generator]
CUT_OFF = {remote_scorer: (RemoteScoringError, r"timed out \(after 3 attempts\)"),
           openai_generator: (openai.APITimeoutError, None)}
REFUSED_ANSWER = {remote_scorer: RemoteScoringError, openai_generator: openai.APIConnectionError}


@pytest.mark.parametrize("caller", CALLERS)
def test_a_stored_url_whose_host_is_no_longer_allowed_is_refused_when_called_not_retried(caller, settings):
    settings.STEPWISE_OUTBOUND_ALLOW = ["169.254.10.10"]
    call = caller("http://169.254.10.10:8000", timeout=5.0)
    settings.STEPWISE_OUTBOUND_ALLOW = []  # the exemption taken back after the URL was stored
    refused = RemoteScoringError if caller is remote_scorer else ValueError
    started = time.monotonic()
    with pytest.raises(refused, match=r"169\.254\.10\.10 is a link-local address .*STEPWISE_OUTBOUND_ALLOW"):
        call()
    assert time.monotonic() - started < 1.0  # refused before connecting, and not tried again


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("answer", [trickled_headers, trickled_body])
def test_a_server_that_trickles_a_byte_every_tenth_of_a_second_is_cut_at_the_deadline(caller, answer):
    error, message = CUT_OFF[caller]
    with RawServer(answer) as server:
        started = time.monotonic()
        with pytest.raises(error, match=message):
            caller(server.url, timeout=0.5)()
        elapsed = time.monotonic() - started
    # Each read is quick, so only a deadline for the whole answer ends an attempt: 3 of 0.5 s.
    assert server.requests == 3 and elapsed < 3 * 0.5 + 1.5, elapsed


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("answer", [declared_huge, streamed_huge, compressed])
def test_an_answer_too_large_or_compressed_unasked_is_refused_once_not_retried(caller, answer):
    with RawServer(answer) as server:
        started = time.monotonic()
        with pytest.raises(REFUSED_ANSWER[caller]) as refused:
            caller(server.url)()
        assert time.monotonic() - started < 10
    assert server.requests == 1  # the same server would send the same
    assert server.headers[0]["accept-encoding"] == "identity"
    cause = refused.value.__cause__ or refused.value
    assert ("compressed" if answer is compressed else "larger than") in str(cause)


def test_each_request_on_a_kept_alive_connection_has_its_own_deadline():
    def slowish(conn: socket.socket) -> bool:
        time.sleep(0.6)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        return True

    with RawServer(slowish) as server, outbound_http.client(seconds=1.0, max_bytes=1024) as client:
        statuses = [client.get(f"{server.url}/").status_code for _ in range(3)]
    assert statuses == [200, 200, 200]  # 1.8 s on one connection, each answer within its own second
    assert server.connections == 1


def test_no_redirect_is_followed_even_when_a_caller_asks():
    def moved(conn: socket.socket) -> bool:
        conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n")
        return True

    with RawServer(moved) as server, outbound_http.client(seconds=5.0, max_bytes=1024) as client:
        response = client.get(f"{server.url}/", follow_redirects=True)
    assert response.status_code == 302 and server.requests == 1
    assert outbound_http.not_followed(response) == "a redirect to /elsewhere, not followed"
