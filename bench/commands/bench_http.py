"""./stepwise bench bench_http [--pool 50000] [--clients 1,10] [--seconds 30] [--url URL]
    [--site-projects N --site-solutions M]

The annotator's workflow over HTTP against the real server as `./stepwise run` starts it (waitress,
2 processes x 4 Django threads on loopback), or the server at --url.
N simulated annotators, one OS process each, log in, claim (POST /label/next, which answers
with the task page), rate every step as htmx does, submit, for --seconds, then stop by
themselves. --in-process TASKS measures instead what each request costs inside Django (SQL
statements, CPU ms, bytes; see bench/request_costs.py), figures a loaded machine does not
change much.

Prints per-endpoint p50/p95/p99, labeled tasks per second, 5xx responses, duplicate
assignments (a solution served to two annotators), lost labels (acknowledged ratings or
submits the database does not hold), and server + database CPU per labeled task: the server's
processes and the PostgreSQL backends of our database, from /proc (on SQLite the database
works inside the server, so its CPU is in the server figure). Uses the database of
DATABASE_URL; the pool (source "bench-workspace", shared with bench_workspace) is built on
first use and kept, in the project a fresh install has, labeled under its own URLs (/p/default/).
--site-projects and --site-solutions put other projects beside it (bench/site_pool.py), to measure
labeling one project of a large site against the same project alone. Refuses a database holding
other solutions unless --force.
"""
from __future__ import annotations

import os
import secrets
import time
from collections import Counter
from contextlib import nullcontext
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, connections

from annotate.labeling import quality, queue_items, queueing, roles
from annotate.models import Annotation, Completion, LabelingConfig, Project, QueueItem, Solution, Step, StepLabel
from bench import label_studio as label_studio_module
from bench import loadtest, request_costs, site_pool, tables
from bench.commands.bench_workspace import BENCH_PRIORITY, BENCH_SETTINGS, SOURCE, bench_project
from bench.commands.bench_workspace import Command as WorkspaceBench

ENDPOINTS = (loadtest.NEXT, loadtest.CLAIM, loadtest.RATE, loadtest.SUBMIT)


class Command(BaseCommand):
    help = "HTTP load test of the labeling workflow through the web server: latency, throughput, errors, CPU per task"

    def add_arguments(self, parser):
        parser.add_argument("--pool", type=int, default=50_000, help="Solutions in the bench pool")
        parser.add_argument("--clients", "--annotators", default="1,10",
                            help="Comma-separated client counts, one run each")
        parser.add_argument("--seconds", "--duration", type=float, default=30, help="Labeling time per run")
        parser.add_argument("--max-requests", type=int, default=100_000, help="Requests per client at most")
        parser.add_argument("--url", default="", help="Target a running server instead of starting one")
        parser.add_argument("--server-pid", type=int, default=0,
                            help="With --url: the server's main pid (waitress or gunicorn), to measure its CPU")
        parser.add_argument("--force", action="store_true", help="Run on a database that holds other solutions")
        parser.add_argument("--site-projects", type=int, default=0, metavar="N",
                            help="Other projects beside the bench's, each with a pool and queue (bench/site_pool.py)")
        parser.add_argument("--site-solutions", type=int, default=0, metavar="M",
                            help="Solutions the other projects hold in all (made once and kept)")
        parser.add_argument("--product-defaults", action="store_true",
                            help="Label under the product's default settings (gold at 10 %%, screening required) "
                                 "with a screening set and gold items drawn from the pool, instead of plain tasks only")
        parser.add_argument("--in-process", type=int, default=0, metavar="TASKS",
                            help="Instead: label TASKS tasks through Django's test client and print SQL "
                                 "statements, CPU ms and bytes per request (figures the load does not change)")
        parser.add_argument("--profile", action="store_true",
                            help="With --in-process: also where each request's CPU goes, by layer (cProfile)")
        parser.add_argument("--compare-paths", action="store_true",
                            help="With --in-process on PostgreSQL: label every other task through the writes "
                                 "made on SQLite (a locked transaction per action, a claim row by row); print "
                                 "each path's CPU per request")
        parser.add_argument("--label-studio", type=Path, metavar="VENV",
                            help="Also run Label Studio (installed in VENV, see bench/label_studio.py) on the same "
                                 "pool size after each Stepwise run, under the same driver, and print both "
                                 "systems' CPU per labeled task side by side")
        parser.add_argument("--label-studio-database", default=label_studio_module.DATABASE,
                            help="With --label-studio: an empty PostgreSQL database for it")

    def handle(self, *args, pool: int, clients: str, seconds: float, max_requests: int, url: str, server_pid: int,
               force: bool, in_process: int, product_defaults: bool, profile: bool = False,
               compare_paths: bool = False, label_studio: Path | None = None,
               label_studio_database: str = label_studio_module.DATABASE, site_projects: int = 0,
               site_solutions: int = 0, **options):
        try:
            runs = [int(c) for c in clients.split(",") if c.strip()]
        except ValueError:
            raise CommandError(f"--clients {clients!r}: expected comma-separated integers, e.g. 1,10") from None
        if label_studio and (url or in_process or not _postgres()):
            raise CommandError("--label-studio compares the two servers this command starts, both on PostgreSQL: "
                               "not with --url or --in-process, nor on SQLite")
        if not force and Solution.objects.exclude(source__in=[SOURCE, site_pool.SOURCE]).exists():
            raise CommandError("this database holds other solutions; run on a scratch database or pass --force")
        built = WorkspaceBench().build_pool(pool)
        site_built = site_pool.fill(projects=site_projects, solutions=site_solutions)
        config = LabelingConfig.of(bench_project())
        saved = {"qc_rate": config.qc_rate, "screening_required": config.screening_required,
                 "overlap_k": config.overlap_k}
        LabelingConfig.objects.update_or_create(
            pk=config.pk, defaults=_product_defaults() if product_defaults else BENCH_SETTINGS
        )
        if product_defaults:
            _gold_and_screening()
        if in_process:
            try:
                self.measure_in_process(in_process, profile=profile, compare_paths=compare_paths)
            finally:
                LabelingConfig.objects.update_or_create(pk=config.pk, defaults=saved)
            return
        server = loadtest.RunningServer(url, server_pid) if url and server_pid else None
        if not url:
            server = loadtest.Server(database_url=_database_url())
        size = Solution.objects.filter(source=SOURCE).count()
        peer = (label_studio_module.serving(label_studio, label_studio_database, pool=size, annotators=max(runs))
                if label_studio else nullcontext())
        try:
            if server and not url:
                server.wait_until_up()
            self.stdout.write(
                f"Stepwise HTTP benchmark on {connection.vendor} ({size:,} solutions in the pool"
                f"{f', built in {built:.1f} s' if built else ''}); "
                f"{url or 'waitress 2 processes x 4 Django threads'}; "
                f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start; {_settings_named()}"
            )
            self.stdout.write(_site_named(site_built))
            with peer as label_studio_server:
                for n in runs:
                    # Under the project's own URLs, as with several projects every page is.
                    ours = self.run_once(n, seconds, max_requests, f"{url or server.url}/p/{bench_project().slug}",
                                         server)
                    if label_studio_server:
                        theirs = label_studio_module.run(label_studio_server, label_studio_database, n, seconds)
                        self.stdout.write("\n".join(label_studio_module.side_by_side(ours, theirs, n)))
        finally:
            if server and not url:
                server.stop()
            LabelingConfig.objects.update_or_create(pk=config.pk, defaults=saved)

    def measure_in_process(self, tasks: int, *, profile: bool = False, compare_paths: bool = False) -> None:
        _queue_whole_pool()
        _vacuum()
        username, _ = _annotators(1)[0]
        costs = request_costs.measure(user=get_user_model().objects.get(username=username), tasks=tasks,
                                      profile=profile, compare_paths=compare_paths)
        self.stdout.write(f"Stepwise labeling requests in-process on {connection.vendor}, {tasks} tasks; "
                          f"{_settings_named()}:")
        self.stdout.write("\n".join(request_costs.report(costs)))

    def run_once(self, n: int, seconds: float, max_requests: int, base_url: str, server) -> loadtest.Measured:
        _queue_whole_pool()
        _vacuum()
        users = _annotators(n)
        connections.close_all()  # Nothing of ours holds a connection while the clients run.
        try:
            run = loadtest.measure(base_url=base_url, users=users, seconds=seconds, max_requests=max_requests,
                                   server=server, database=connection.settings_dict["NAME"] if _postgres() else None)
        except RuntimeError as error:
            raise CommandError(str(error)) from None
        duplicates, lost = _check(run.results, [name for name, _ in users])
        checks = f"duplicate assignments: {duplicates}; lost labels: {lost}"
        self.stdout.write("\n".join(loadtest.report(run, ENDPOINTS, checks)))
        return run


def _postgres() -> bool:
    return connection.vendor == "postgresql"


def _database_url() -> str:
    """The URL of the database this process uses (under pytest, the test database)."""
    db = connection.settings_dict
    if not _postgres():
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def _queue_whole_pool() -> None:
    """Queue every unlabeled bench solution, past the project's queue size: the queue is as big as the
    pool, so whatever scans the queue per request shows in the figures, and no run runs out of work."""
    project = bench_project()
    config = LabelingConfig.objects.get(project=project)
    size, config.queue_size = config.queue_size, Solution.objects.filter(source=SOURCE).count()
    config.save()  # a save, not an update: the settings' memo hears of it
    try:
        queueing.ensure_default_queue(project)
    finally:
        config.queue_size = size
        config.save()
    QueueItem.objects.filter(solution__source=SOURCE, status=QueueItem.Status.AVAILABLE).exclude(
        priority=BENCH_PRIORITY
    ).update(priority=BENCH_PRIORITY)


# Bench solutions made gold (their gold labels the +1 every simulated annotator gives, so each
# passes screening), the first few of them the screening set. They stay so: gold and screening
# items are served only when the settings ask for them, and never queued as ordinary work.
GOLD_ITEMS, SCREENING_ITEMS = 25, 5


def _site_named(built: float | None) -> str:
    projects = Project.objects.exclude(pk=bench_project().pk)
    others = Solution.objects.exclude(project=bench_project()).count()
    made = f", built in {built:.1f} s" if built else ""
    count = projects.count() + 1
    return f"the site: {count} project{'s' if count > 1 else ''}, {others:,} solutions in the others{made}"


def _product_defaults() -> dict:
    return {name: LabelingConfig._meta.get_field(name).default for name in BENCH_SETTINGS}


def _settings_named() -> str:
    config = LabelingConfig.of(bench_project())
    if not config.qc_rate and not config.screening_required:
        return "plain tasks (no gold, no screening)"
    return (f"gold at {config.qc_rate:.0%}, screening {'required' if config.screening_required else 'off'} "
            f"({len(quality.screening_solution_ids(bench_project()))} items)")


def _gold_and_screening() -> None:
    """Make the bench's gold items and screening set, once (a grown pool adds none)."""
    bench = Solution.objects.filter(source=SOURCE)
    missing = GOLD_ITEMS - bench.filter(is_gold=True).count()
    for solution in bench.filter(is_gold=False).order_by("-pk")[:max(0, missing)]:
        Step.objects.filter(solution=solution).update(gold_rating=1)
        Solution.objects.filter(pk=solution.pk).update(is_gold=True)
        queue_items.withdraw(solution=solution)
    screening = quality.screening_solution_ids(bench_project())
    for solution in bench.filter(is_gold=True).exclude(pk__in=screening)[:max(0, SCREENING_ITEMS - len(screening))]:
        queueing.add_to_screening(solution=solution)


def _vacuum() -> None:
    """PostgreSQL: vacuum and analyze the labeling tables before a run. Queueing the whole pool
    again leaves a dead row per queue item, which autovacuum would clear on a production server
    but not where it is off (as on this project's CI machines); left there, every scan of the
    queue in the run would wade through them and the database's CPU per task would measure the
    bench's setup, not labeling. The solutions too: with the statistics from before some were
    made gold, the draw of a gold item scanned the whole pool (15 ms instead of 0.25). The steps
    too: on a site of 7.8 million steps never analyzed, the planner took a solution for 36,000 of
    them, costed a claim's write past jit_above_cost and spent 13 ms compiling it, each time."""
    tables.vacuum(QueueItem, Annotation, StepLabel, Completion, Solution, Step)


def _annotators(n: int) -> list[tuple[str, str]]:
    """n fresh annotator accounts for one run, as (username, password)."""
    stamp = int(time.time() * 1000)
    password = secrets.token_urlsafe(12)
    project = bench_project()
    users = []
    for i in range(n):
        user = get_user_model().objects.create_user(f"bench-http-{stamp}-{i}", password=password)
        roles.grant_role(user, roles.ANNOTATOR, project)
        users.append((user.username, password))
    return users


def _check(results: list[loadtest.ClientResult], usernames: list[str]) -> tuple[int, int]:
    """(solutions served to more than one annotator, acknowledged writes the database lacks)."""
    # Gold and screening items are everyone's; an ordinary item goes to one annotator.
    ordinary = Annotation.objects.filter(annotator__username__in=usernames, is_quality_control=False,
                                         is_initial_screening=False)
    per_solution = Counter(ordinary.values_list("solution_id", flat=True))
    duplicates = sum(1 for count in per_solution.values() if count > 1)
    acknowledged = {(pk, index): rating for r in results for pk, index, rating in r.ratings}
    stored = {
        (pk, index): rating for pk, index, rating in Completion.objects.filter(
            step_label__annotation_id__in={pk for pk, _ in acknowledged}, index=0
        ).values_list("step_label__annotation_id", "step_label__index", "rating")
    }
    lost = sum(1 for key, rating in acknowledged.items() if stored.get(key) != rating)
    submitted = {pk for r in results for pk in r.submitted}
    lost += len(submitted) - Annotation.objects.submitted().filter(pk__in=submitted).count()
    return duplicates, lost
