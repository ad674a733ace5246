"""Benchmark: export N annotated solutions in every format; print seconds and peak memory.

Creates the data once with bulk_create (in a generation of its own, so the export filter
touches only these rows), then exports each format in a fresh child process, whose peak
resident memory (ru_maxrss) is then the export's alone. Targets for 50k solutions:
<= 5 s and <= 150 MB.
"""
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction
from django.utils import timezone

from annotate.models import Annotation, Completion, Problem, Project, Solution, Step, StepLabel
from annotate.models.pool import content_hash
from annotate.pool import exporting

BENCH_GENERATION = 990_001
SOURCE = "bench-export"


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM; ru_maxrss would include the parent's at exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


class Command(BaseCommand):
    help = "Export N annotated solutions in each format; print seconds and peak memory per format."
    project: Project | None = None  # --project's; the sole project when the rows are made without it

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--solutions", type=int, default=50_000)
        parser.add_argument("--steps", type=int, default=5, help="Steps per solution, all labeled")
        parser.add_argument("--format", action="append", choices=list(exporting.FORMATS), help="Default: all")
        parser.add_argument("--container", choices=exporting.CONTAINERS, default="jsonl",
                            help="Write JSON Lines (default), a Parquet folder or a datasets folder")
        parser.add_argument("--cleanup", action="store_true", help="Delete the benchmark rows afterwards")
        parser.add_argument(
            "--compare", action="store_true",
            help="Also export PRM800K the plain ORM way (model instances + prefetch_related), for the ratio",
        )
        parser.add_argument("--project", default=None, metavar="SLUG",
                            help="The project the rows go into and are exported from (default: the sole one)")
        parser.add_argument("--child", help="internal: export one format in this process and print JSON")

    def handle(self, *args, **opts) -> None:
        self.project = Project.objects.named(opts["project"])
        if opts["child"]:
            self.stdout.write(json.dumps(self.export_once(opts["child"], opts["container"])))
            return
        self.ensure_data(opts["solutions"], opts["steps"])
        others = Solution.objects.exclude(project=self.project).count()
        self.stdout.write(f"project {self.project.slug}; {others:,} solutions in the site's other projects")
        self.stdout.write(f"{opts['solutions']} annotated solutions x {opts['steps']} steps "
                          f"({settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}), as {opts['container']}")
        # Wall time depends on what else the machine runs; CPU time is this process's alone.
        self.stdout.write(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        self.stdout.write(f"{'format':<13} {'lines':>7} {'seconds':>8} {'cpu s':>6} {'lines/s':>8} {'MB':>7} "
                          f"{'peak RSS MB':>12} {'export +MB':>11}")
        results = {}
        for format in [*(opts["format"] or exporting.FORMATS), *(["orm"] if opts["compare"] else [])]:
            results[format] = result = json.loads(subprocess.run(
                [sys.executable, "-m", "bench", "bench_export", "--child", format, "--project", self.project.slug,
                 "--container", "jsonl" if format == "orm" else opts["container"]],
                cwd=settings.BASE_DIR, check=True, capture_output=True, text=True,
            ).stdout.strip().splitlines()[-1])
            self.stdout.write(
                f"{format:<13} {result['lines']:>7} {result['seconds']:>8.2f} {result['cpu']:>6.2f} "
                f"{result['lines'] / result['seconds']:>8.0f} {result['bytes'] / 1e6:>7.1f} "
                f"{result['peak_rss_mb']:>12.1f} {result['peak_rss_mb'] - result['start_rss_mb']:>11.1f}"
            )
        if "orm" in results and "prm800k" in results:
            orm, ours = results["orm"], results["prm800k"]
            self.stdout.write(f"PRM800K, plain ORM / chunk records: {orm['seconds'] / ours['seconds']:.1f}x wall, "
                              f"{orm['cpu'] / ours['cpu']:.1f}x CPU (same bytes: {orm['bytes'] == ours['bytes']})")
        if opts["cleanup"]:
            self.delete_rows()

    def export_once(self, format: str, container: str = "jsonl") -> dict:
        options = exporting.ExportOptions(generations=(BENCH_GENERATION,), container=container)
        from annotate.pool import prm800k  # noqa: F401 -- imported before the baseline is taken
        start_rss = peak_rss_mb()
        with tempfile.TemporaryDirectory(dir=settings.EXPORTS_DIR) as folder:
            path = Path(folder) / (f"bench.{format}.jsonl" if container == "jsonl" else f"bench-{format}")
            started, cpu_started = time.perf_counter(), time.process_time()
            if format == "orm":
                lines = self.export_with_model_instances(path, options)
            else:
                lines = exporting.write_export(path=path, format=format, options=options, project=self.project)
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
            files = [f for f in path.rglob("*") if f.is_file()] if path.is_dir() else [path]
            size = sum(f.stat().st_size for f in files)
        return {"lines": lines, "seconds": seconds, "cpu": cpu, "bytes": size, "start_rss_mb": start_rss,
                "peak_rss_mb": peak_rss_mb()}

    def export_with_model_instances(self, path: Path, options: exporting.ExportOptions) -> int:
        """The straightforward way, for comparison: instances, prefetch_related, iterator()."""
        from annotate.pool import prm800k

        qs = exporting.selected_annotations(project=self.project, options=options)
        qs = qs.select_related("solution__problem", "queue_item")
        qs = qs.prefetch_related("solution__steps", "step_labels__completions")
        lines = 0
        with path.open("w", encoding="utf-8") as out:
            for annotation in qs.iterator(chunk_size=exporting.CHUNK_SIZE):
                out.write(json.dumps(prm800k.line_for_annotation(annotation), ensure_ascii=False) + "\n")
                lines += 1
        return lines

    def ensure_data(self, n: int, n_steps: int) -> None:
        have = Annotation.objects.filter(project=self.project, generation=BENCH_GENERATION).count()
        if have == n:
            return
        self.delete_rows()
        started = time.perf_counter()
        batch = 5000
        for offset in range(0, n, batch):
            with transaction.atomic():
                self.create_batch(range(offset, min(n, offset + batch)), n_steps)
        self.stdout.write(f"created {n} annotated solutions in {time.perf_counter() - started:.1f} s")

    def delete_rows(self) -> None:
        """The benchmark's rows, a batch of problems at a time: a delete collects every related row
        of the problems it is given in one statement, which PostgreSQL caps at 65,535 parameters."""
        ids = list(Problem.objects.filter(project=self.project, source=SOURCE).values_list("pk", flat=True))
        for start in range(0, len(ids), 5000):
            Problem.objects.filter(pk__in=ids[start:start + 5000]).delete()

    def create_batch(self, numbers: range, n_steps: int) -> None:
        now = timezone.now()
        self.project = self.project or Project.objects.sole()
        problems = Problem.objects.bulk_create(
            Problem(project=self.project, statement=f"Bench problem {i}: what is {i} * 7 + 3?",
                    ground_truth_answer=str(i * 7 + 3), source=SOURCE,
                    ground_truth_solution=f"{i} * 7 = {i * 7}, plus 3 is {i * 7 + 3}.",
                    content_hash=content_hash(SOURCE, "problem", i))
            for i in numbers
        )
        texts = {i: [f"Step {s} of solution {i}: we compute {i} * 7 = {i * 7} and carry on with the sum."
                     for s in range(n_steps)] for i in numbers}
        solutions = Solution.objects.bulk_create(
            Solution(project=self.project, problem=p, final_answer=str(i * 7 + 3), is_correct=i % 3 != 0, source=SOURCE,
                     generator="bench", pre_generated_verifier_score=0.5, content_hash=content_hash(SOURCE, i))
            for i, p in zip(numbers, problems)
        )
        Step.objects.bulk_create(
            Step(solution=s, index=k, text=t) for i, s in zip(numbers, solutions) for k, t in enumerate(texts[i])
        )
        annotations = Annotation.objects.bulk_create(
            Annotation(project=self.project, solution=s, labeler=f"bench-{i % 40}", status=Annotation.Status.SUBMITTED,
                       generation=BENCH_GENERATION, timestamp=now, total_time_ms=60_000,
                       finish_reason="found_error" if i % 3 == 0 else "solution")
            for i, s in zip(numbers, solutions)
        )
        step_labels = StepLabel.objects.bulk_create(
            StepLabel(annotation=a, index=k, chosen_completion=0) for a in annotations for k in range(n_steps)
        )
        # Mostly +1 with some neutral steps; every third solution ends in a -1 (found_error).
        Completion.objects.bulk_create(
            Completion(step_label=label, index=0, text=texts[i][label.index], flagged=False,
                       rating=-1 if i % 3 == 0 and label.index == n_steps - 1 else (1 if (i + label.index) % 4 else 0))
            for j, i in enumerate(numbers) for label in step_labels[j * n_steps:(j + 1) * n_steps]
        )
