"""./stepwise manage import_pool PATH [--project SLUG] [--format ...] [--split MODE] [--source NAME] [--atomic]
[--report R] [--no-queue]: import a file into a project's pool, then queue its new solutions for labeling; the
import is recorded as a job, as an upload is, and listed on the imports page."""
from django.core.management.base import BaseCommand, CommandError

from annotate.management.projects import add_project_option, project_of
from annotate.pool import importing
from annotate.pool.importing import jobs as import_jobs
from steps import splitting


class Command(BaseCommand):
    help = (f"Import a JSONL file ({', '.join(importing.FORMATS)}) into a project's pool, grading every final "
            "answer.")

    def add_arguments(self, parser):
        parser.add_argument("path")
        add_project_option(parser)
        parser.add_argument("--format", default="auto", choices=importing.names())
        parser.add_argument("--source", default=None, help="Source name stored on problems and solutions")
        parser.add_argument("--atomic", action="store_true", help="Import nothing when any line fails")
        parser.add_argument("--report", default=None, help="Write one JSON line per input line here")
        parser.add_argument("--no-queue", action="store_true",
                            help="Do not queue the new solutions for labeling (the next rescore still ranks them)")
        parser.add_argument(
            "--split", default="auto", choices=[*splitting.SPLIT_MODES, "blank", "lines"],
            help="How solution text is split into steps (docs/step-splitting.md; blank and lines are the old "
                 "names of blank_line and line); a line's own 'steps' list is kept as given",
        )

    def handle(self, *args, **options):
        project = project_of(options)
        try:
            job, summary = import_jobs.import_here(
                project=project, path=options["path"], format=options["format"], source=options["source"] or "",
                atomic=options["atomic"], report_path=options["report"] or "", split_mode=options["split"],
                queue=not options["no_queue"],
            )
        except (OSError, ValueError) as error:
            raise CommandError(str(error)) from error
        for line in summary.first_errors:
            self.stderr.write(line)
        self.stdout.write(f"{summary.describe()} (project {project.slug}, import {job.pk})")
        if not options["no_queue"] and not summary.rolled_back:
            if job.queued:
                self.stdout.write(f"{job.queued} solutions queued for labeling; "
                                  "the next rescore ranks them with the rest")
            else:
                self.stdout.write("nothing queued: each solution is queued, labeled or a reference, "
                                  "or the queue (or its problem) is full")
        if summary.report_path:
            self.stdout.write(f"report: {summary.report_path}")
        if not summary.ok:
            # A non-zero exit, so scripts and CI notice a partial import.
            raise CommandError(f"{summary.errors} line(s) failed")
