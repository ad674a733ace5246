"""Attacks on the site as a client on the open internet can make them, each bounded in sockets,
bytes and time, with real annotators' logins and next tasks timed beside each.

One script for the web server alone (tests/infra/test_web_server.py) and for the same server
behind deploy/nginx.conf (tests/infra/test_nginx_front.py): an attack is a function of the
`Target`, a stop event and a ready event (set once it is under way) that runs until told to
stop and returns what it saw; `beside_real_users` runs it while annotators log in and claim
tasks, and watches the memory of the site's processes and the temporary files they hold.
"""
from __future__ import annotations

import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.loadtest import _CSRF_INPUT, NEXT, Annotator, Connection, percentile

PASSWORD = "pass-for-tests"
MIB = 1024 * 1024
BIG_STATIC = "big.bin"  # the large static file a slow reader asks for (made by the test)


@dataclass
class Target:
    """Where attacks go, and what is watched there."""

    port: int
    pids: Callable[[], list[int]]  # the processes whose memory and temporary files count
    temp_dirs: list[Path]  # where those processes put temporary files
    idle_timeout: float  # seconds after which it closes a connection that sends nothing
    host: str = "127.0.0.1"

    @property
    def netloc(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.netloc}"

    def connect(self, receive_buffer: int = 0, timeout: float = 10) -> socket.socket:
        sock = socket.socket()
        if receive_buffer:  # before connecting: the window the server sees is set at the handshake
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.settimeout(timeout)
        sock.connect((self.host, self.port))
        return sock


# --- the real users ---------------------------------------------------------------------------------

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


@dataclass
class Outcome:
    login_p95: float  # ms
    claim_p95: float  # ms
    login_alone: float  # p95 ms, before the attack
    claim_alone: float
    logins: int
    claims: int
    rss_growth: float  # bytes, the site's processes together, largest during the attack
    largest_temp_file: int  # bytes
    seen: dict = field(default_factory=dict)  # what the attack saw

    def __str__(self) -> str:
        return (f"login p95 {self.login_p95:.0f} ms over {self.logins} (alone {self.login_alone:.0f}), next task p95 "
                f"{self.claim_p95:.0f} ms over {self.claims} (alone {self.claim_alone:.0f}), RSS "
                f"+{self.rss_growth / MIB:.1f} MiB, largest temporary file {self.largest_temp_file / MIB:.1f} MiB; "
                f"the attack saw {self.seen}")


def beside_real_users(target: Target, usernames: list[str], attack: Callable, seconds: float = 6) -> Outcome:
    """Run `attack` while `usernames` log in and claim tasks for about `seconds`."""
    timed_logins_and_claims(target.url, usernames[:4], seconds=0)  # each process's first pages, not measured
    logins_alone, claims_alone = timed_logins_and_claims(target.url, usernames[4:], seconds=0)
    watch = Watch(target)
    stop, ready, seen = threading.Event(), threading.Event(), {}
    attacker = threading.Thread(target=lambda: seen.update(attack(target, stop, ready)), daemon=True)
    attacker.start()
    try:
        ready.wait(60)  # the attack under way
        time.sleep(1)
        logins, claims = timed_logins_and_claims(target.url, usernames, seconds)
    finally:
        stop.set()
        attacker.join(timeout=60)
        watch.stop()
    assert not attacker.is_alive(), "the attack did not stop"
    return Outcome(percentile(logins, 95), percentile(claims, 95), percentile(logins_alone, 95),
                   percentile(claims_alone, 95), len(logins), len(claims),
                   watch.rss_growth, watch.largest_temp_file, seen)


class Watch:
    """Samples the target's processes every 0.1 s: their memory together, the temporary files they hold."""

    def __init__(self, target: Target):
        self.target = target
        self.rss_at_start = self._rss()
        self.rss_growth, self.largest_temp_file = 0.0, 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.wait(0.1):
            self.rss_growth = max(self.rss_growth, self._rss() - self.rss_at_start)
            self.largest_temp_file = max(self.largest_temp_file, self._largest_temp_file())

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)

    def _rss(self) -> int:
        total = 0
        for pid in self.target.pids():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            except OSError:
                continue
        return total

    def _largest_temp_file(self) -> int:
        largest = 0
        dirs = [str(d) for d in self.target.temp_dirs]
        for pid in self.target.pids():
            try:
                fds = list(Path(f"/proc/{pid}/fd").iterdir())
            except OSError:
                continue
            for fd in fds:
                try:
                    if not any(os.readlink(fd).startswith(d) for d in dirs):
                        continue
                    info = os.stat(fd)
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode):
                    largest = max(largest, info.st_size)
        return largest


# --- reading answers ----------------------------------------------------------------------------------

def status_of(sock: socket.socket, timeout: float = 5) -> int | None:
    """The status of the answer on `sock`, None when the server closed it without one (or none came)."""
    sock.settimeout(timeout)
    head = b""
    try:
        while b"\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                break
            head += chunk
    except OSError:
        pass
    parts = head.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[0].startswith(b"HTTP/") and parts[1].isdigit() else None


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed `sock` (or answered on it): it reads as readable."""
    sock.setblocking(False)
    try:
        sock.recv(1, socket.MSG_PEEK)
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def _send_quietly(sock: socket.socket, data: bytes) -> bool:
    try:
        sock.sendall(data)
        return True
    except OSError:  # closed or reset by the server
        return False


def _in_threads(count: int, work: Callable[[int], object]) -> list:
    results: list = [None] * count
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, work(i)), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


# --- the attacks ------------------------------------------------------------------------------------------

def slow_read(target: Target, stop: threading.Event, ready: threading.Event) -> dict:
    """16 sockets with a 4 KiB receive buffer ask for a large static file and never read it."""
    sockets = [target.connect(receive_buffer=4096) for _ in range(16)]
    for sock in sockets:
        sock.sendall(f"GET /static/{BIG_STATIC} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    ready.set()
    stop.wait(120)
    for sock in sockets:
        sock.close()
    return {"sockets": len(sockets)}


def huge_headers(target: Target, stop: threading.Event, ready: threading.Event) -> dict:
    """4 connections each send a 96 MiB header, 1 MiB at a time, for as long as the server takes it."""
    def one(_: int) -> tuple[int | None, int]:
        sock = target.connect()
        sent = 0
        try:
            _send_quietly(sock, b"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
            while sent < 96 * MIB and not stop.is_set() and _send_quietly(sock, b"a" * MIB):
                sent += MIB
            return status_of(sock), sent
        finally:
            sock.close()

    ready.set()
    answers = _in_threads(4, one)
    return {"statuses": [status for status, _ in answers], "most_sent_mib": max(sent for _, sent in answers) / MIB}


def oversize_body(target: Target, stop: threading.Event, ready: threading.Event) -> dict:
    """8 POSTs to the login page (a 10 MiB view) declaring 200 MiB: the answer is awaited before
    any of the body, then the body is sent for as long as the server takes it."""
    def one(_: int) -> tuple[int | None, int]:
        sock = target.connect()
        try:
            sock.sendall(b"POST /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n" % (200 * MIB))
            status = status_of(sock, timeout=5)
            sent = 0
            sock.settimeout(1)
            while sent < 200 * MIB and not stop.is_set() and _send_quietly(sock, b"a" * MIB):
                sent += MIB
            return status, sent
        finally:
            sock.close()

    ready.set()
    answers = _in_threads(8, one)
    return {"statuses": [status for status, _ in answers], "most_taken_mib": max(sent for _, sent in answers) / MIB}


def idle_and_half_headers(target: Target, stop: threading.Event, ready: threading.Event) -> dict:
    """100 sockets that send nothing and 100 that send half a request's headers, then nothing:
    how many are still open 6 s after the target's idle timeout."""
    opened = time.monotonic()
    idle = [target.connect() for _ in range(100)]
    half = [target.connect() for _ in range(100)]
    for sock in half:
        sock.sendall(b"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half: ")
    ready.set()
    stop.wait(120)
    deadline = opened + target.idle_timeout + 6
    while time.monotonic() < deadline and not all(map(closed_by_server, idle + half)):
        time.sleep(0.2)
    seen = {"idle_open": sum(not closed_by_server(s) for s in idle),
            "half_open": sum(not closed_by_server(s) for s in half),
            "seconds": round(time.monotonic() - opened, 1)}
    for sock in idle + half:
        sock.close()
    return seen


def chunked(target: Target, path: str, body: bytes, headers: dict[str, str],
            piece: int = 7) -> tuple[int | None, bytes]:
    """One request whose body is sent chunked, in pieces of `piece` bytes; (status, the whole answer)."""
    sock = target.connect(timeout=30)
    answer = b""
    try:
        head = f"POST {path} HTTP/1.1\r\nHost: {target.netloc}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        pieces = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + piece]), body[i:i + piece])
                          for i in range(0, len(body), piece))
        try:
            sock.sendall(head.encode() + b"\r\n" + pieces + b"0\r\n\r\n")
        except OSError:
            pass  # refused while it streams: the answer is there to read
        while chunk := sock.recv(65536):
            answer += chunk
    except OSError:
        pass
    finally:
        sock.close()
    parts = answer.split(b" ", 2)
    return (int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None), answer


def login_form(target: Target) -> tuple[str, str]:
    """The login page's CSRF token and cookie, as a browser gets them."""
    http = Connection(target.url)
    page = http.request("GET", "/accounts/login/")
    http.close()
    token = _CSRF_INPUT.search(page.text)
    assert token, page.text[:500]
    return token.group(1), "; ".join(f"{name}={value}" for name, value in http.cookies.items())


def chunked_logins(target: Target, stop: threading.Event, ready: threading.Event, username: str) -> dict:
    """Logins whose form is sent chunked, one after another: each must log in (302 away from the login page)."""
    statuses = []
    while not stop.is_set() and len(statuses) < 50:
        token, cookie = login_form(target)
        form = f"username={username}&password={PASSWORD}&csrfmiddlewaretoken={token}".encode()
        status, answer = chunked(target, "/accounts/login/", form, {
            "Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie,
            "Origin": target.url, "Referer": target.url + "/accounts/login/"})
        logged_in = status == 302 and b"location: /accounts/login/" not in answer.lower()
        statuses.append(status if logged_in else f"{status} (not logged in)")
        ready.set()
        stop.wait(3)  # each login is a password hash, the lockout's to bound: a few are enough here
    return {"statuses": sorted(set(statuses), key=str), "count": len(statuses)}


def form_login(target: Target, username: str, password: str, headers: dict[str, str]) -> int | None:
    """One login with `headers` added, sent as is (a header with an underscore included)."""
    token, cookie = login_form(target)
    body = f"username={username}&password={password}&csrfmiddlewaretoken={token}".encode()
    sock = target.connect(timeout=30)
    try:
        head = (f"POST /accounts/login/ HTTP/1.1\r\nHost: {target.netloc}\r\nConnection: close\r\n"
                f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {len(body)}\r\n"
                f"Cookie: {cookie}\r\n"
                f"Origin: {target.url}\r\nReferer: {target.url}/accounts/login/\r\n")
        head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        sock.sendall(head.encode() + b"\r\n" + body)
        return status_of(sock, timeout=30)
    finally:
        sock.close()


def forged_addresses(target: Target, stop: threading.Event, ready: threading.Event, username: str,
                     control: str | None, limit: int) -> dict:
    """Wrong passwords for `username`, each from another forged address in an underscore header
    (`X_Forwarded_For`), then the right one: with `limit` (STEPWISE_LOGIN_FAILURE_LIMIT) wrong passwords
    counted against one address, the right one is refused (429). `control`: another user, whose
    wrong passwords come with well-formed X-Forwarded-For headers from a trusted proxy, and are
    counted against the forged addresses (so the right password is let in)."""
    seen = {}
    for who, header in [(username, "X_Forwarded_For"), (control, "X-Forwarded-For")]:
        if who is None:
            continue
        wrong = [form_login(target, who, "wrong-password", {header: f"203.0.113.{i}"}) for i in range(limit)]
        seen[header] = {"wrong": wrong, "then right": form_login(target, who, PASSWORD, {header: "203.0.113.99"})}
    # The guesses are made; users are timed beside the lockout they left (each guess is a password
    # hash, which is the lockout's to bound, not the web server's).
    ready.set()
    stop.wait(120)
    return seen


def missing_host(target: Target, stop: threading.Event, ready: threading.Event) -> dict:
    """HTTP/1.1 requests without Host, and an HTTP/0.9 request line, over and over."""
    statuses: dict[str, set] = {"HTTP/1.1 without Host": set(), "HTTP/0.9": set()}
    ready.set()
    while not stop.is_set() and sum(map(len, statuses.values())) < 1000:
        for name, request in [("HTTP/1.1 without Host", b"GET /accounts/login/ HTTP/1.1\r\n\r\n"),
                              ("HTTP/0.9", b"GET /accounts/login/\r\n\r\n")]:
            sock = target.connect()
            try:
                sock.sendall(request)
                answer = b""
                sock.settimeout(5)
                while chunk := sock.recv(65536):
                    answer += chunk
            except OSError:
                pass
            finally:
                sock.close()
            parts = answer.split(b" ", 2)
            statuses[name].add(int(parts[1]) if answer.startswith(b"HTTP/") and parts[1].isdigit()
                               else f"no status line: {answer[:40]!r}")
        stop.wait(0.1)
    return {name: sorted(found, key=str) for name, found in statuses.items()}
