"""./stepwise bench bench_import [--solutions 50000] [--keep] [--project SLUG]

Generates a generic JSONL file of model-like solutions (several per problem, some right,
some wrong; answers as integers, thousands, decimals, fractions and LaTeX) in a temporary
folder, imports it with grading, and prints seconds, lines/s and peak memory. A second,
five times smaller file is imported in the same run, so the memory figures show whether
memory grows with the file (it should not: the import streams).

The imports run in a transaction that is rolled back at the end unless --keep is given,
so the benchmark leaves the pool as it found it.
"""
import json
import os
import random
import tempfile
import threading
import time
from pathlib import Path

from django.core.management.base import BaseCommand
from django.db import transaction

from annotate.models import Project, Solution
from annotate.pool import importing
from steps.grading import clear_cache


class _Rollback(Exception):
    pass


def _answer_pair(rng: random.Random, n: int) -> tuple[str, str, str]:
    """(ground truth, right answer as a model writes it, a wrong answer) for problem n."""
    kind = n % 5
    if kind == 0:
        value = rng.randint(2, 999)
        return str(value), str(value), str(value + rng.randint(1, 9))
    if kind == 1:
        value = rng.randint(1000, 99999)
        return f"{value:,}".replace(",", ",\\!"), f"{value:,}", str(value - 10)
    if kind == 2:
        a, b = rng.randint(1, 20), rng.randint(21, 40)
        return f"\\frac{{{a}}}{{{b}}}", f"{a}/{b}", f"\\frac{{{b}}}{{{a}}}"
    if kind == 3:
        value = rng.randint(1, 999) / 4
        return str(value), f"{value:.2f}", str(value + 0.5)
    k = n % 7 + 2
    return f"\\frac{{\\sqrt{{{k}}}}}{{2}}", f"\\sqrt{{{k}}}/2", f"\\sqrt{{{k}}}"


def write_pool(path: Path, *, solutions: int, per_problem: int = 8, seed: int = 0) -> None:
    rng = random.Random(seed)
    with open(path, "w") as handle:
        for s in range(solutions):
            n = s // per_problem
            truth, right, wrong = _answer_pair(random.Random(n), n)
            answer = right if rng.random() < 0.6 else wrong
            steps = [
                f"Step {i + 1} of attempt {s} (seed {seed}): we simplify the expression for problem {n}."
                for i in range(rng.randint(3, 9))
            ]
            steps.append(f"So the result is ${answer}$.\n\n# Answer\n\n{answer}")
            line = {"problem": f"Benchmark problem {n}: compute the quantity.", "ground_truth_answer": truth,
                    "steps": steps, "source": "bench", "generator": "bench-model"}
            handle.write(json.dumps(line) + "\n")


class _PeakMemory:
    """Samples this process's resident memory while a block runs (ru_maxrss never goes down)."""

    def __enter__(self):
        self.peak = self.start = self._rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _sample(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self._rss())

    @staticmethod
    def _rss() -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Command(BaseCommand):
    help = "Benchmark import_pool with grading on generated generic solutions; prints figures."

    def add_arguments(self, parser):
        parser.add_argument("--solutions", type=int, default=50_000)
        parser.add_argument("--keep", action="store_true", help="Keep the imported rows")
        parser.add_argument("--project", default=None, metavar="SLUG",
                            help="The project imported into (default: the sole one)")

    def handle(self, *args, **options):
        total = options["solutions"]
        self.project = Project.objects.named(options["project"])
        others = Solution.objects.exclude(project=self.project).count()
        self.stdout.write(f"project {self.project.slug}; {others:,} solutions in the site's other projects")
        with tempfile.TemporaryDirectory(prefix="bench-import-") as folder:
            small, large = Path(folder) / "small.jsonl", Path(folder) / "large.jsonl"
            write_pool(small, solutions=max(total // 5, 1), seed=1)
            write_pool(large, solutions=total, seed=2)
            self.stdout.write(f"generated {total} solutions ({large.stat().st_size / 1e6:.1f} MB) and {total // 5}")
            try:
                with transaction.atomic():
                    for path in (small, large):
                        clear_cache()  # each run grades from scratch
                        self._run(path)
                    graded = (Solution.objects.filter(project=self.project, source="bench")
                              .values_list("is_correct", flat=True))
                    verdicts = {v: list(graded).count(v) for v in (True, False, None)}
                    self.stdout.write(
                        f"graded: {verdicts[True]} correct, {verdicts[False]} wrong, {verdicts[None]} unknown"
                    )
                    if not options["keep"]:
                        raise _Rollback
            except _Rollback:
                self.stdout.write("rolled back (use --keep to keep the rows)")

    def _run(self, path: Path) -> None:
        with _PeakMemory() as memory:
            started, cpu_started = time.perf_counter(), time.process_time()
            summary = importing.import_pool(project=self.project, path=path, format="generic")
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        self.stdout.write(
            f"{path.name}: {summary.lines} lines in {seconds:.2f} s = {summary.lines / seconds:,.0f} lines/s "
            f"({cpu:.2f} s CPU in this process; load average {os.getloadavg()[0]:.1f}); "
            f"{summary.created} created, {summary.errors} errors; "
            f"peak RSS {memory.peak / 2**20:.0f} MiB (+{(memory.peak - memory.start) / 2**20:.0f} MiB during import)"
        )
