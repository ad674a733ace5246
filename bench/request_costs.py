"""What each request of the labeling workflow costs, measured in-process: load-independent figures.

Wall-clock latency on a shared machine is mostly time spent waiting for a CPU, so changes to
the request path are judged here by what does not depend on the load: SQL statements (Django's
CaptureQueriesContext), CPU milliseconds of this process (`time.process_time`, which counts the
ORM, the middleware and the templates; on PostgreSQL on this machine, its backend's CPU is
reported apart, over the whole run) and bytes answered. It
drives the same workflow as `loadtest.Annotator` — claim, rate every step as htmx does, submit
(answered with the next task) — through Django's test client, so every middleware and the session
and CSRF machinery run as under the web server.
"""
from __future__ import annotations

import cProfile
import pstats
import re
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from urllib.parse import urlencode

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from annotate.labeling import rows, starting
from bench import loadtest

CLAIM, RATE, SUBMIT = "claim POST", "rating save", "submit + next task"
ENDPOINTS = (CLAIM, RATE, SUBMIT)
_STEP = re.compile(r'<li id="step-\d+"')
_ANNOTATION = re.compile(r'data-annotation="(\d+)"')


@dataclass
class Cost:
    """Totals of one endpoint over a run."""

    requests: int = 0
    queries: int = 0
    cpu_s: float = 0.0
    bytes: int = 0

    def per_request(self) -> tuple[float, float, float]:
        """(statements, CPU ms, bytes) per request."""
        n = max(1, self.requests)
        return self.queries / n, self.cpu_s * 1000 / n, self.bytes / n


# Where a request's CPU goes, by the code it runs in: the first layer whose path fragment is in a
# function's file name owns that function's own time (cProfile's tottime).
LAYERS = (
    ("SQL (psycopg, Django's database layer)", ("psycopg", "/django/db/")),
    ("templates (Jinja2)", ("jinja2", "/templates/")),
    ("sessions and auth", ("/django/contrib/sessions/", "/django/contrib/auth/", "/axes/", "infra/login_lockout")),
    ("middleware (CSRF, CSP, security, htmx)", ("/django/middleware/", "/csp/", "django_htmx", "infra/limits")),
    ("cache (Redis, memo)", ("/redis/", "/django/core/cache/", "infra/memo", "infra/throttling")),
    ("Stepwise's labeling code", ("/annotate/", "/infra/")),
    ("the test client (not the server's)", ("/django/test/", "/bench/")),
    ("Django's request handling", ("/django/",)),
)
OTHER = "other (Python itself)"


def layer_times(profiler: cProfile.Profile) -> dict[str, float]:
    """Own time per layer. A builtin's or the standard library's time (a socket read, json, random)
    goes to the layers of the code that called it, in proportion to each caller's share."""
    found: dict[str, float] = defaultdict(float)
    for (filename, _, _), (_, _, own, _, callers) in pstats.Stats(profiler).stats.items():  # type: ignore[attr-defined]
        layer = layer_of(filename)
        if layer != OTHER or not callers:
            found[layer] += own
            continue
        edges = {caller: edge[2] for caller, edge in callers.items()}
        total = sum(edges.values()) or 1.0
        for (caller_file, _, _), share in edges.items():
            found[layer_of(caller_file)] += own * share / total
    return found


def layer_of(filename: str) -> str:
    for name, fragments in LAYERS:
        if any(fragment in filename for fragment in fragments):
            return name
    return OTHER


@dataclass
class Costs:
    endpoints: dict[str, Cost] = field(default_factory=dict)
    tasks: int = 0
    database_cpu_s: float | None = None  # the PostgreSQL backend's, where it runs on this machine
    # With compare_paths: (path, endpoint) -> [requests, Django CPU s, PostgreSQL CPU s].
    paths: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    # With profile=True: seconds of own time per (endpoint, layer), under cProfile.
    layers: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))

    def add(self, name: str, queries: int, cpu_s: float, size: int) -> None:
        cost = self.endpoints.setdefault(name, Cost())
        cost.requests += 1
        cost.queries += queries
        cost.cpu_s += cpu_s
        cost.bytes += size

    def per_task(self) -> tuple[float, float, float]:
        """(requests, statements, CPU ms) per labeled task."""
        n = max(1, self.tasks)
        total = self.endpoints.values()
        return (sum(c.requests for c in total) / n, sum(c.queries for c in total) / n,
                sum(c.cpu_s for c in total) * 1000 / n)


# Stepwise's writes on PostgreSQL against those it makes on SQLite, both on PostgreSQL, task by
# task in one process: an action's versioned write (rows.act) against its locked transaction
# (rows.change, which rows.act takes where the connection is not PostgreSQL's), and a claim's one
# statement (starting.start) against its rows one by one.
POSTGRESQL_WRITES, SQLITE_WRITES = "PostgreSQL's writes", "SQLite's writes"


@contextmanager
def _writes(path: str | None) -> Iterator[None]:
    if path != SQLITE_WRITES:
        yield
        return
    real_connection, real_start = rows.connection, starting.start
    rows.connection = SimpleNamespace(vendor="sqlite")  # type: ignore[assignment]
    starting.start = starting._start_row_by_row
    try:
        yield
    finally:
        rows.connection, starting.start = real_connection, real_start


def measure(*, user, tasks: int, profile: bool = False, compare_paths: bool = False) -> Costs:
    """Label up to `tasks` tasks as `user` (an annotator) and return what each request cost; with
    `profile`, also where its CPU went by layer (cProfile slows every call, so the layers' shares
    mean something, not their sum); with `compare_paths`, every other task is labeled through the
    writes Stepwise makes on SQLite, and each path's CPU, Django's and PostgreSQL's, is kept apart."""
    client = Client(SERVER_NAME="localhost")  # in ALLOWED_HOSTS with DEBUG off, unlike "testserver"
    client.force_login(user)
    costs = Costs()
    htmx = {"HTTP_HX_REQUEST": "true"}
    client.get("/")  # Warm up (imports, templates compiled), as a long-running server is.

    def timed(name: str, method, path: str, **kwargs):
        profiler = cProfile.Profile(time.process_time) if profile else None  # CPU, not waits on the database
        connection.queries_log.clear()  # A full log (9,000 statements) would count none of a request's.
        with CaptureQueriesContext(connection) as queries:
            started = time.process_time()
            if profiler:
                profiler.enable()
            response = method(path, **kwargs)
            if profiler:
                profiler.disable()
            spent = time.process_time() - started
        costs.add(name, len(queries), spent, len(response.content))
        if profiler:
            for layer, seconds in layer_times(profiler).items():
                costs.layers[name, layer] += seconds
        return response

    backend = _backend_pid()
    database_before = loadtest.cpu_seconds(backend) if backend else None
    page = timed(CLAIM, client.post, "/label/next")  # Then each submit answers with the next task.
    for _ in range(tasks):
        found = _ANNOTATION.search(page.content.decode())
        if page.status_code != 200 or found is None:
            break  # Nothing left: sent to the page between tasks.
        pk = found.group(1)
        clock = loadtest.ActiveClock()
        steps = len(_STEP.findall(page.content.decode()))
        path = (POSTGRESQL_WRITES, SQLITE_WRITES)[costs.tasks % 2] if compare_paths and backend else None
        with _writes(path):
            for index in range(steps):
                with _path_cost(costs, path, RATE, backend):
                    timed(RATE, client.post, f"/label/{pk}/rate",
                          **form({"index": index, "rating": 1, **clock.report(index)}), **htmx)
            with _path_cost(costs, path, SUBMIT, backend):
                page = timed(SUBMIT, client.post, f"/label/{pk}/submit", **form(clock.report(steps - 1)), **htmx)
        if page.status_code == 200:
            costs.tasks += 1
    if backend and database_before is not None:
        costs.database_cpu_s = loadtest.cpu_seconds(backend) - database_before
    return costs


@contextmanager
def _path_cost(costs: Costs, path: str | None, endpoint: str, backend: int | None) -> Iterator[None]:
    """Add the block's CPU, Django's and the backend's, to the path's endpoint (with a path)."""
    if not path or not backend:
        yield
        return
    started, database_started = time.process_time(), loadtest.cpu_seconds(backend)
    yield
    spent = costs.paths.setdefault((path, endpoint), [0, 0.0, 0.0])
    spent[0] += 1
    spent[1] += time.process_time() - started
    spent[2] += loadtest.cpu_seconds(backend) - database_started


def _backend_pid() -> int | None:
    """The pid of this connection's PostgreSQL backend, if it is a process of this machine."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    return pid if loadtest.cpu_seconds(pid) else None


def form(fields: dict) -> dict:
    """A POST body as htmx and the HTTP driver send it (URL-encoded; the test client's default,
    multipart, costs the server more to parse than any browser makes it spend)."""
    return {"data": urlencode(fields), "content_type": "application/x-www-form-urlencoded"}


def report(costs: Costs) -> list[str]:
    """The figures as lines of text."""
    lines = [f"  {'endpoint':<18} {'requests':>8} {'SQL/req':>8} {'CPU ms/req':>10} {'bytes/req':>10}"]
    for name in ENDPOINTS:
        cost = costs.endpoints.get(name)
        if cost:
            queries, cpu_ms, size = cost.per_request()
            lines.append(f"  {name:<18} {cost.requests:>8} {queries:>8.1f} {cpu_ms:>10.2f} {size:>10,.0f}")
    requests, queries, cpu_ms = costs.per_task()
    lines.append(f"  per labeled task ({costs.tasks}): {requests:.1f} requests, {queries:.1f} SQL statements, "
                 f"{cpu_ms:.1f} ms of Django CPU (in-process)")
    if costs.database_cpu_s is not None:
        database_ms = costs.database_cpu_s * 1000 / max(1, costs.tasks)
        lines.append(f"  PostgreSQL's backend: {database_ms:.1f} ms of CPU per labeled task; "
                     f"with Django's, {cpu_ms + database_ms:.1f} ms")
    if costs.paths:
        lines += paths_report(costs)
    if costs.layers:
        lines += layer_report(costs)
    return lines


def paths_report(costs: Costs) -> list[str]:
    """Each path's CPU per request, Django's + PostgreSQL's backend's, and their ratio."""
    lines = ["  every other task through SQLite's writes (CPU per request, Django + PostgreSQL):",
             f"  {'endpoint':<20} {POSTGRESQL_WRITES:>26} {SQLITE_WRITES:>26} {'ratio':>6}"]
    for endpoint in (RATE, SUBMIT):
        spent = [costs.paths.get((path, endpoint)) for path in (POSTGRESQL_WRITES, SQLITE_WRITES)]
        if None in spent:
            continue
        ms = [(django / n * 1000, database / n * 1000) for n, django, database in spent]  # type: ignore[misc]
        cells = [f"{django:.2f} + {database:.2f} = {django + database:.2f} ms" for django, database in ms]
        lines.append(f"  {endpoint:<20} {cells[0]:>26} {cells[1]:>26} {sum(ms[0]) / sum(ms[1]):>6.2f}")
    return lines


def layer_report(costs: Costs) -> list[str]:
    """Each endpoint's profiled time by layer, as shares of its total."""
    names = [name for name, _ in LAYERS] + [OTHER]
    lines = ["  where the CPU goes (share of each endpoint's profiled time):",
             f"  {'layer':<42} " + " ".join(f"{endpoint:>18}" for endpoint in ENDPOINTS)]
    totals = {e: sum(t for (end, _), t in costs.layers.items() if end == e) or 1.0 for e in ENDPOINTS}
    for layer in names:
        shares = [costs.layers.get((e, layer), 0.0) / totals[e] for e in ENDPOINTS]
        lines.append(f"  {layer:<42} " + " ".join(f"{share:>17.0%} " for share in shares))
    return lines
