"""./stepwise bench bench_workspace [--solutions 50000] [--tasks 200] [--clients 1,10]

Latency of the annotator's two hot paths, measured through the whole Django stack
(middleware, session, view, template) with the test client, one OS process per client:

- next task: POST /label/next (the claim), which answers with the labeling page;
- rating save: an htmx POST /label/<id>/rate answered with the task partial.

Each client labels tasks back to back (claim, rate every step, submit). Runs with 1 and
with 10 clients at once and prints p50/p95 per path and the number of solutions handed to
more than one client (duplicate leases; must be 0). Uses the database of DATABASE_URL:
run it once on the embedded default (SQLite) and once on PostgreSQL. The pool is built
on first use (source "bench-workspace") and kept for later runs; the command refuses a
database holding other solutions unless --force, since its clients would label them.
"""
from __future__ import annotations

import multiprocessing
import os
import re
import time
from collections import Counter

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, connections
from django.test import Client
from django.urls import reverse

from annotate.labeling import queueing, roles
from annotate.models import Annotation, LabelingConfig, Problem, Project, QueueItem, Solution, Step
from annotate.models.pool import content_hash

SOURCE = "bench-workspace"
STEPS_PER_SOLUTION = 4
# Above any real selection priority, so bench clients only ever claim bench items.
BENCH_PRIORITY = 1e9
# Every task a plain one: no gold, no screening, one annotator per item.
BENCH_SETTINGS = {"qc_rate": 0, "screening_required": False, "overlap_k": 1}
BENCH_PROJECT = "default"  # the project a fresh install has; other projects may stand beside it (bench/site_pool.py)


def bench_project() -> Project:
    """The project the bench pool lives in and its clients label."""
    return Project.objects.get_or_create(slug=BENCH_PROJECT, defaults={"name": "Default"})[0]


class Command(BaseCommand):
    help = "Next-task and rating-save latency (p50/p95) with 1 and 10 concurrent annotators; duplicate leases"

    def add_arguments(self, parser):
        parser.add_argument("--solutions", type=int, default=50_000)
        parser.add_argument("--tasks", type=int, default=200, help="Tasks labeled per run (split over the clients)")
        parser.add_argument("--clients", default="1,10", help="Comma-separated client counts, one run each")
        parser.add_argument("--force", action="store_true", help="Run on a database that holds other solutions")

    def handle(self, *args, solutions: int, tasks: int, clients: str, force: bool, **options):
        try:
            runs = [int(c) for c in clients.split(",") if c.strip()]
        except ValueError:
            raise CommandError(f"--clients {clients!r}: expected comma-separated integers, e.g. 1,10") from None
        if not force and Solution.objects.exclude(source=SOURCE).exists():
            raise CommandError("this database holds other solutions; run on a scratch database or pass --force")
        built = self.build_pool(solutions)
        config = LabelingConfig.of(bench_project())
        saved = (config.qc_rate, config.screening_required, config.overlap_k)
        LabelingConfig.objects.update_or_create(pk=config.pk, defaults=BENCH_SETTINGS)
        try:
            pool = Solution.objects.filter(source=SOURCE).count()
            self.stdout.write(f"Stepwise workspace benchmark on {connection.vendor} "
                              f"({pool:,} solutions in the pool{f', built in {built:.1f} s' if built else ''}); "
                              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
            self.stdout.write(f"{'clients':>7} {'tasks':>6} {'next p50':>9} {'next p95':>9} {'claim p95':>9} "
                              f"{'save p50':>9} {'save p95':>9} {'dup':>4} {'tasks/s':>8}  (ms)")
            for n in runs:
                self.run_clients(n, max(n, tasks // n * n))
        finally:
            LabelingConfig.objects.update_or_create(pk=config.pk, defaults={
                "qc_rate": saved[0], "screening_required": saved[1], "overlap_k": saved[2]
            })

    def build_pool(self, n: int) -> float | None:
        """Make the bench pool (once) and queue it; returns seconds spent, None if it existed."""
        have = Solution.objects.filter(source=SOURCE).count()
        if have >= n:
            return None
        started = time.perf_counter()
        project = bench_project()
        batch = 2000
        for start in range(have, n, batch):
            stop = min(n, start + batch)
            problems = Problem.objects.bulk_create(
                Problem(project=project, statement=f"Benchmark problem {i}: what is ${i} + {i}$?",
                        ground_truth_answer=str(2 * i), source=SOURCE, content_hash=content_hash(SOURCE, "problem", i))
                for i in range(start, stop)
            )
            made = Solution.objects.bulk_create(
                Solution(project=project, problem=p, final_answer=str(2 * i), is_correct=True, source=SOURCE,
                         content_hash=content_hash(SOURCE, "solution", i))
                for p, i in zip(problems, range(start, stop))
            )
            Step.objects.bulk_create(
                Step(solution=s, index=k, text=f"Step {k + 1}: add ${i}$ and ${i}$ <<{i}+{i}={2 * i}>>.")
                for s, i in zip(made, range(start, stop)) for k in range(STEPS_PER_SOLUTION)
            )
        queueing.ensure_default_queue(project)
        QueueItem.objects.filter(solution__source=SOURCE, status=QueueItem.Status.AVAILABLE).update(
            priority=BENCH_PRIORITY
        )
        return time.perf_counter() - started

    def run_clients(self, n: int, tasks: int) -> None:
        User = get_user_model()
        stamp = int(time.time() * 1000)
        users = [User.objects.create_user(f"bench-{stamp}-{n}-{i}", password=None) for i in range(n)]
        for user in users:
            roles.grant_role(user, roles.ANNOTATOR, bench_project())
        connections.close_all()  # Children must not share the parent's database connection.
        ctx = multiprocessing.get_context("fork")
        barrier, queue = ctx.Barrier(n), ctx.Queue()
        processes = [ctx.Process(target=_client, args=(user.pk, tasks // n, barrier, queue)) for user in users]
        started = time.perf_counter()
        for process in processes:
            process.start()
        results = [queue.get(timeout=1800) for _ in processes]
        elapsed = time.perf_counter() - started
        for process in processes:
            process.join()
        if any("error" in r for r in results):
            raise CommandError("a client failed: " + "; ".join(r["error"] for r in results if "error" in r))
        claim, nxt, save, claimed = [], [], [], []
        for r in results:
            claim += r["claim"]
            nxt += r["next"]
            save += r["save"]
            claimed += r["solutions"]
        duplicates = sum(1 for count in Counter(claimed).values() if count > 1)
        in_db = Annotation.objects.filter(annotator__in=users).values("solution_id")
        db_dups = sum(1 for c in Counter(a["solution_id"] for a in in_db).values() if c > 1)
        self.stdout.write(
            f"{n:>7} {len(claimed):>6} {_pct(nxt, 50):>9.1f} {_pct(nxt, 95):>9.1f} {_pct(claim, 95):>9.1f} "
            f"{_pct(save, 50):>9.1f} {_pct(save, 95):>9.1f} {max(duplicates, db_dups):>4} "
            f"{len(claimed) / elapsed:>8.1f}"
        )


def _pct(values: list[float], p: int) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def _client(user_id: int, tasks: int, barrier, queue) -> None:
    """One annotator in its own process; puts its timings (or its error) on the queue."""
    try:
        queue.put(_label(user_id, tasks, barrier))
    except Exception as error:  # noqa: BLE001 - reported by the parent
        barrier.abort()
        queue.put({"error": repr(error)})
    finally:
        connections.close_all()


def _label(user_id: int, tasks: int, barrier) -> dict[str, list]:
    """Claim, rate every step, submit, `tasks` times; latencies in ms."""
    connections.close_all()
    user = get_user_model().objects.get(pk=user_id)
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    htmx = {"HTTP_HX_REQUEST": "true"}
    out: dict[str, list] = {"claim": [], "next": [], "save": [], "solutions": []}
    client.get(reverse("annotate:home"))  # Warm up (imports, templates), as a long-running server is.
    barrier.wait()
    for _ in range(tasks):
        started = time.perf_counter()
        response = client.post(reverse("annotate:label-next"))
        if response.status_code == 302:
            break  # Nothing left to label: redirected home.
        if response.status_code != 200:
            raise RuntimeError(f"POST /label/next answered {response.status_code}")
        done = time.perf_counter()  # The claim answers with the labeling page itself.
        out["claim"].append(1000 * (done - started))
        out["next"].append(1000 * (done - started))
        pk = int(re.search(r'data-annotation="(\d+)"', response.content.decode()).group(1))
        out["solutions"].append(Annotation.objects.values_list("solution_id", flat=True).get(pk=pk))
        for index in range(STEPS_PER_SOLUTION):
            started = time.perf_counter()
            data = {"index": index, "rating": 1, "total_ms": 1000 * (index + 1)}
            saved = client.post(reverse("annotate:label-rate", args=[pk]), data, **htmx)
            out["save"].append(1000 * (time.perf_counter() - started))
            assert saved.status_code == 200, saved.content
        client.post(reverse("annotate:label-submit", args=[pk]), {"then": "home"})
    return out
