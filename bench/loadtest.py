"""The HTTP load test behind `bench_http`: simulated annotators against the real server.

Each annotator is one OS process with its own keep-alive connection and cookies (session,
CSRF token),
doing what a person at the labeling page does: log in, claim the next task (POST
/label/next, which answers with the task page), rate every step as htmx does, submit.
The clients stop by themselves at a deadline and after a bounded number of requests.
Afterwards the parent checks the database: no solution went to two annotators and every
rating the server acknowledged is stored. CPU is read from /proc for the web server's processes
and for the PostgreSQL backends serving our database (found by their process titles, so
short-lived connections are seen too; see `DatabaseCpu`).
"""
from __future__ import annotations

import http.client
import http.cookies
import json
import multiprocessing
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import requests

# Endpoint names as the report prints them.
# A submit answers with the next task's page, so "next task" is the first claim, then each submit.
CLAIM, NEXT, RATE, SUBMIT = "claim POST", "next task", "rating save", "submit"
_STEP = re.compile(r'<li id="step-\d+"')
_ANNOTATION = re.compile(r'<section id="task"[^>]* data-annotation="(\d+)"')
_CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class ClientResult:
    """What one simulated annotator saw: timings per endpoint and acknowledged writes."""

    timings: dict[str, list[float]] = field(default_factory=dict)
    statuses: Counter = field(default_factory=Counter)
    ratings: list[tuple[int, int, int]] = field(default_factory=list)  # (annotation, step index, rating)
    submitted: list[int] = field(default_factory=list)  # annotation ids acknowledged as submitted
    claimed: list[int] = field(default_factory=list)  # annotation ids served
    requests: int = 0
    error: str = ""
    cpu_s: float = 0.0  # the client's own CPU while labeling: on one machine it competes with the server
    no_answers: list[str] = field(default_factory=list)  # why a request got no answer (the first few)

    def time(self, name: str, ms: float) -> None:
        self.timings.setdefault(name, []).append(ms)


class _Done(Exception):
    """The client reached its deadline or its request budget."""


class _NoAnswer(Exception):
    """The server dropped or refused the connection (counted as status 0); the client goes on."""


class ActiveClock:
    """The active-time fields the page adds to every labeling POST (static/js/label.js): the
    task's running total and that of the step the cursor is on (the one being rated)."""

    def __init__(self):
        self.started = self.last = time.monotonic()
        self.steps: dict[int, int] = {}

    def report(self, step: int) -> dict[str, str]:
        now = time.monotonic()
        self.steps[step] = self.steps.get(step, 0) + int((now - self.last) * 1000)
        self.last = now
        return {"total_ms": str(int((now - self.started) * 1000)), "step_ms": f"{step}:{self.steps[step]}"}


@dataclass
class Answer:
    """An HTTP answer as the driver reads it."""

    status_code: int
    text: str
    headers: http.client.HTTPMessage


class Connection:
    """What a browser tab keeps: one keep-alive connection and the site's cookies.

    On http.client rather than requests: the clients share the server's two CPUs, and requests
    spent 1.7 ms of CPU a request against http.client's 0.3 (timed alone against gunicorn), a
    fifth of the machine at ten clients taken from the server being measured."""

    def __init__(self, base_url: str, timeout: float = 30):
        parts = urlsplit(base_url)
        self.host, self.port, self.timeout = parts.hostname, parts.port, timeout
        self.prefix = parts.path.rstrip("/")  # a project's URLs: /p/<slug>
        self.cookies: dict[str, str] = {}
        self._connection: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, form: dict | None = None, headers: dict | None = None,
                json_body: object = None) -> Answer:
        sent = dict(headers or {})
        body = None
        if form is not None:
            body = urlencode(form)
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        elif json_body is not None:
            body = json.dumps(json_body)
            sent["Content-Type"] = "application/json"
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{name}={value}" for name, value in self.cookies.items())
        connection, reused = self._open()
        try:
            connection.request(method, self.prefix + path, body=body, headers=sent)
            response = connection.getresponse()
            text = response.read().decode()
        except (ConnectionResetError, BrokenPipeError):  # http.client.RemoteDisconnected among them
            self.close()
            if not reused:
                raise
            # A kept connection the server closed just as the request went out, unanswered: sent
            # once more on a new one, as browsers do (the new one is not retried).
            return self.request(method, path, form, headers, json_body)
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        self._keep_cookies(response.headers.get_all("Set-Cookie") or [])
        if response.will_close:
            self.close()
        return Answer(response.status, text, response.headers)

    def _open(self) -> tuple[http.client.HTTPConnection, bool]:
        """The kept connection (and True), unless the server has closed it while it sat idle
        (it is then readable, at its end), as a browser finds out before reusing one."""
        connection = self._connection
        if connection is not None and connection.sock is not None \
                and not select.select([connection.sock], [], [], 0)[0]:
            return connection, True
        self.close()
        self._connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return self._connection, False

    def _keep_cookies(self, headers: list[str]) -> None:
        for header in headers:
            for name, morsel in http.cookies.SimpleCookie(header).items():
                if morsel["max-age"] == "0":
                    self.cookies.pop(name, None)
                else:
                    self.cookies[name] = morsel.value

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class Annotator:
    """One simulated annotator: a logged-in session that labels tasks until told to stop."""

    def __init__(self, base_url: str, username: str, password: str, deadline: float, max_requests: int):
        self.base, self.username, self.password = base_url.rstrip("/"), username, password
        self.deadline, self.max_requests = deadline, max_requests
        self.http = Connection(self.base)
        self.result = ClientResult()

    def _send(self, method: str, path: str, **kwargs) -> Answer:
        if self.result.requests >= self.max_requests or time.monotonic() >= self.deadline:
            raise _Done
        self.result.requests += 1
        try:
            response = self.http.request(method, path, **kwargs)
        except (OSError, http.client.HTTPException) as error:
            self.result.statuses[0] += 1
            if len(self.result.no_answers) < 5:
                self.result.no_answers.append(f"{method} {path}: {error!r}"[:300])
            raise _NoAnswer(str(error)) from error
        self.result.statuses[response.status_code] += 1
        return response

    def _post(self, path: str, data: dict | None = None, htmx: bool = False, json_body: object = None) -> Answer:
        headers = {"X-CSRFToken": self.http.cookies.get("csrftoken", ""), "Referer": self.base + "/"}
        if htmx:
            headers["HX-Request"] = "true"
        return self._send("POST", path, form=data, headers=headers, json_body=json_body)

    def log_in(self) -> None:
        self._log_in_form("/accounts/login/", {"username": self.username, "password": self.password})

    def _log_in_form(self, path: str, fields: dict) -> None:
        """Log in as a person does: the login page (its CSRF token), then the form, answered with a redirect."""
        page = self._send("GET", path)
        token = _CSRF_INPUT.search(page.text)
        response = self._post(path, {**fields, "csrfmiddlewaretoken": token.group(1) if token else ""})
        if response.status_code != 302:
            raise RuntimeError(f"{self.username} could not log in at {path} (HTTP {response.status_code})")

    def label_until_done(self) -> None:
        page = None
        while True:
            try:
                page = self.label_one(page)
                if page is False:
                    return
            except _NoAnswer:
                page = None  # Claiming again resumes the open task, as a reload would.
            except _Done:
                return

    def label_one(self, page: Answer | None) -> Answer | bool | None:
        """Label one task as the browser does: claim (unless the last submit answered with this
        task's page), rate every step +1, submit. Returns the next task's page when the submit
        answered with it, None to claim next, False when the queue is empty."""
        if page is None:
            page = self._claim()
            if page is None:
                return False
        match = _ANNOTATION.search(page.text)
        if page.status_code != 200 or match is None:
            return None
        pk = int(match.group(1))
        self.result.claimed.append(pk)
        clock = ActiveClock()
        for index in range(len(_STEP.findall(page.text))):
            started = time.perf_counter()
            response = self._post(f"/label/{pk}/rate", {"index": index, "rating": 1, **clock.report(index)},
                                  htmx=True)
            self.result.time(RATE, (time.perf_counter() - started) * 1000)
            if response.status_code == 200:
                self.result.ratings.append((pk, index, 1))
        started = time.perf_counter()
        response = self._post(f"/label/{pk}/submit", clock.report(max(clock.steps, default=0)), htmx=True)
        spent = (time.perf_counter() - started) * 1000
        self.result.time(SUBMIT, spent)
        if response.status_code != 200:
            return None
        self.result.submitted.append(pk)
        if _ANNOTATION.search(response.text) is None:
            return False if "HX-Redirect" in response.headers else None  # Nothing left: sent to the start page.
        self.result.time(NEXT, spent)  # The submit's answer is the next task.
        return response

    def _claim(self) -> Answer | None:
        """POST /label/next, which answers with the task page; None when nothing is left."""
        started = time.perf_counter()
        claim = self._post("/label/next", {})
        spent = (time.perf_counter() - started) * 1000
        self.result.time(CLAIM, spent)
        if claim.status_code != 200:
            return None  # Nothing left (redirected home) or refused: counted in statuses.
        self.result.time(NEXT, spent)
        return claim


def client_process(base_url: str, username: str, password: str, seconds: float, max_requests: int,
                   barrier, results, annotator_class: type[Annotator]) -> None:
    """Body of one client process: log in, wait for the others, label until the deadline."""
    annotator = annotator_class(base_url, username, password, deadline=float("inf"), max_requests=max_requests)
    try:
        _log_in_patiently(annotator)
        barrier.wait(timeout=120)
        # The login's connection sat idle while the others logged in, past gunicorn's 2 s
        # keep-alive: the first claim sent on it met a reset (once in a 30-client soak).
        annotator.http.close()
        annotator.deadline = time.monotonic() + seconds
        started = time.process_time()
        annotator.label_until_done()
        annotator.result.cpu_s = time.process_time() - started
    except Exception as error:  # noqa: BLE001 - reported by the parent
        annotator.result.error = f"{username}: {error!r}"
        barrier.abort()
    results.put(annotator.result)


def _log_in_patiently(annotator: Annotator, attempts: int = 3) -> None:
    """Log in, retrying a dropped connection: N password hashes at once on a small machine can
    outlast gunicorn's worker timeout, and a login is setup, not what is measured."""
    for attempt in range(attempts):
        try:
            annotator.log_in()
            return
        except _NoAnswer:
            if attempt == attempts - 1:
                raise
            time.sleep(1 + attempt)


def run_clients(*, base_url: str, users: list[tuple[str, str]], seconds: float, max_requests: int,
                on_start=None, annotator_class: type[Annotator] = Annotator) -> tuple[list[ClientResult], float]:
    """Run one process per (username, password); returns their results and the labeling seconds.

    `annotator_class`: what each client does (an Annotator, or another site's workflow with its
    log_in and label_until_done, as bench/label_studio.py drives Label Studio).

    `on_start` is called once every client has logged in, just before they start labeling
    (the CPU counters are read there, so logins are not charged to labeling).
    """
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(len(users) + 1), ctx.Queue()
    processes = [
        ctx.Process(target=client_process, args=(base_url, name, password, seconds, max_requests, barrier, results,
                                                     annotator_class))
        for name, password in users
    ]
    for process in processes:
        process.start()
    try:
        barrier.wait(timeout=180)
    except threading.BrokenBarrierError:
        pass  # A client failed to log in; its error comes back with its result.
    if on_start:
        on_start()
    started = time.perf_counter()
    collected = [results.get(timeout=seconds + 300) for _ in processes]
    elapsed = time.perf_counter() - started
    for process in processes:
        process.join(timeout=30)
    return collected, elapsed


@dataclass
class Measured:
    """One run of the clients, with the CPU the server and its database spent while they labeled
    (None where it was not measured: a server known only by its URL, a database not PostgreSQL)."""

    results: list[ClientResult]
    elapsed: float
    server_s: float | None
    database_s: float | None

    @property
    def labeled(self) -> int:
        return sum(len(r.submitted) for r in self.results)

    def per_task_ms(self, seconds: float | None) -> float | None:
        return seconds / self.labeled * 1000 if seconds is not None and self.labeled else None

    @property
    def cpu_per_task_ms(self) -> float | None:
        """The server's and its database's CPU per labeled task (None where the server's was not read)."""
        if self.server_s is None:
            return None
        return self.per_task_ms(self.server_s + (self.database_s or 0))

    @property
    def clients_cpu_s(self) -> float:
        return sum(r.cpu_s for r in self.results)


def measure(*, base_url: str, users: list[tuple[str, str]], seconds: float, max_requests: int, server=None,
            database: str | None = None, annotator_class: type[Annotator] = Annotator) -> Measured:
    """run_clients, reading the CPU of `server` (anything with pids()) and of the PostgreSQL
    backends of `database` from the moment every client has logged in; RuntimeError if a client failed."""
    database_cpu = DatabaseCpu(database) if database else None
    before: dict[str, float] = {}

    def on_start() -> None:
        before["server"] = server_cpu(server.pids()) if server else 0.0
        if database_cpu:
            database_cpu.start()

    results, elapsed = run_clients(base_url=base_url, users=users, seconds=seconds, max_requests=max_requests,
                                   on_start=on_start, annotator_class=annotator_class)
    server_s = server_cpu(server.pids()) - before["server"] if server else None
    database_s = database_cpu.stop() if database_cpu else None
    errors = [r.error for r in results if r.error]
    if errors:
        raise RuntimeError("a client failed: " + "; ".join(errors))
    return Measured(results, elapsed, server_s, database_s)


# --- the server ---------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """The web server as `./stepwise run` starts it (the script's `web_server`: waitress, 4 Django
    threads per process), `workers` processes on loopback."""

    threads = 4  # infra.web_server.THREADS

    def __init__(self, *, database_url: str, workers: int = 2, extra_env: dict | None = None,
                 log: Path | None = None):
        self.port, self.workers = free_port(), workers
        self.url = f"http://127.0.0.1:{self.port}"
        root = Path(__file__).resolve().parent.parent
        env = {**os.environ, "DATABASE_URL": database_url, "STEPWISE_VENV": sys.prefix, **(extra_env or {})}
        env.setdefault("SECRET_KEY", "bench-http-not-secret")
        # Its log in a file, not a pipe nobody reads while it runs (a full pipe would stall the
        # server); with `log`, the access log as well, in that file.
        self.log = log.open("a+b") if log else tempfile.TemporaryFile()
        access = "" if log else " >/dev/null"
        self.process = subprocess.Popen(
            ["bash", "-c", f'source "{root / "stepwise"}" && web_server {self.port} {workers}{access}'],
            cwd=root, env=env, stdout=self.log, stderr=self.log, start_new_session=True,
        )

    def wait_until_up(self, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the web server exited: {self._log_tail()}")
            try:
                requests.get(self.url + "/accounts/login/", timeout=5)
            except requests.RequestException:
                time.sleep(0.2)
                continue
            self._warm()
            return
        raise RuntimeError(f"the web server did not answer within {seconds} s")

    def _warm(self) -> None:
        """A page from every worker before anything is measured: a worker's first request loads
        what a long-running one holds (templates, URL patterns, its database connection), over a
        second on a small machine, and the first answer came from one worker only."""
        with ThreadPoolExecutor(max_workers=self.workers * self.threads) as pool:
            list(pool.map(lambda _: requests.get(self.url + "/accounts/login/", timeout=30),
                          range(4 * self.workers * self.threads)))

    def pids(self) -> list[int]:
        return [self.process.pid, *_children(self.process.pid)]

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.log.close()


class RunningServer:
    """A server started elsewhere (--url), known by its main pid so its CPU can be read."""

    def __init__(self, url: str, pid: int):
        self.url, self.pid = url, pid

    def pids(self) -> list[int]:
        return [self.pid, *_children(self.pid)]


# --- CPU ----------------------------------------------------------------------------

def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def cpu_seconds(pid: int, *, reaped: bool = False) -> float:
    """User + system CPU of a process (with `reaped`, plus its waited-for children); 0 if gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # After the ")": state is field 3, utime 14, stime 15, cutime 16, cstime 17 (man 5 proc).
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / _CLOCK_TICKS


def server_cpu(pids: list[int]) -> float:
    """The server's CPU: the main process with its reaped children, plus the live workers."""
    master, *workers = pids
    return cpu_seconds(master, reaped=True) + sum(cpu_seconds(pid) for pid in workers)


class DatabaseCpu:
    """CPU of the PostgreSQL backends serving one database, seen through their process titles.

    The server is shared (other databases, other users), so only backends whose title names
    our database count. A backend that lives a few milliseconds (one connection per request)
    ends between two reads of /proc, so a sampler thread reads every backend's counters
    every few milliseconds and keeps the last value seen per pid: what a backend spent after
    its last sample is missed, so with short connections the figure is a lower bound.
    """

    def __init__(self, database: str, interval: float = 0.005):
        self.title = f" {database} "
        self.interval = interval
        self.seen: dict[int, float] = {}
        self._baseline: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _backends(self) -> list[int]:
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if self.title in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                        pids.append(int(entry.name))
                except OSError:
                    continue
        return pids

    def _read(self) -> None:
        for pid in self._backends():
            value = cpu_seconds(pid)
            if value:
                self.seen[pid] = max(value, self.seen.get(pid, 0.0))

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._read()

    def start(self) -> None:
        self._read()
        self._baseline = dict(self.seen)
        self._thread.start()

    def stop(self) -> float:
        """Seconds of CPU our backends spent since start()."""
        self._stop.set()
        self._thread.join()
        self._read()
        return sum(value - self._baseline.get(pid, 0.0) for pid, value in self.seen.items())


# --- figures -------------------------------------------------------------------------

def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def milliseconds(value: float | None) -> str:
    """A figure in ms as the reports print it; n/a where it was not measured."""
    return "n/a" if value is None else f"{value:.1f} ms"


def report(run: Measured, endpoints: tuple[str, ...], checks: str) -> list[str]:
    """The figures of one run as lines of text: requests and statuses, latency per endpoint, why
    requests went unanswered, `checks` (what the caller verified afterwards), CPU per task."""
    timings: dict[str, list[float]] = {}
    statuses: Counter = Counter()
    for r in run.results:
        statuses.update(r.statuses)
        for name, values in r.timings.items():
            timings.setdefault(name, []).extend(values)
    n, labeled, total = len(run.results), run.labeled, sum(statuses.values())
    errors_5xx = sum(count for status, count in statuses.items() if status >= 500)
    lines = [f"\n{n} client{'s' if n != 1 else ''}, {run.elapsed:.1f} s: {labeled} tasks labeled "
             f"({labeled / run.elapsed:.2f} tasks/s), {total} requests, {errors_5xx} 5xx "
             f"({100 * errors_5xx / max(1, total):.3f} %), "
             f"{statuses[0]} without an answer (statuses {dict(sorted(statuses.items()))})",
             f"  {'endpoint':<14} {'count':>6} {'p50':>7} {'p95':>7} {'p99':>7}  (ms)"]
    for name in endpoints:
        values = timings.get(name, [])
        lines.append(f"  {name:<14} {len(values):>6} {percentile(values, 50):>7.1f} "
                     f"{percentile(values, 95):>7.1f} {percentile(values, 99):>7.1f}")
    lines += [f"  without an answer: {reason}" for reason in [x for r in run.results for x in r.no_answers][:5]]
    lines.append(f"  {checks}")

    def per_task(seconds: float | None) -> str:
        return milliseconds(run.per_task_ms(seconds))

    lines.append(f"  CPU per labeled task: server {per_task(run.server_s)}, database {per_task(run.database_s)}, "
                 f"together {milliseconds(run.cpu_per_task_ms)}; load average {os.getloadavg()[0]:.1f}")
    # The simulated annotators run on the same CPUs as the server: what they took is time the
    # server's requests waited for a CPU, so latencies under many clients are an upper bound.
    lines.append(f"  the clients' own CPU: {per_task(run.clients_cpu_s)} per labeled task, "
                 f"{100 * run.clients_cpu_s / (run.elapsed * (os.cpu_count() or 1)):.0f} % of the machine's CPUs")
    return lines
