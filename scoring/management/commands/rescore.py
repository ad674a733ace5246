"""`manage.py rescore [--project SLUG] [--model NAME] [--make-current] [--wait] [--resume]`: score a
project's pool with a model version (by default its current one) and rebuild its queue."""
import time

from django.core.management.base import BaseCommand, CommandError

from jobs.states import JobState
from scoring.management.projects import add_project_argument, project_option
from scoring.models import RescoreJob
from scoring.rescoring import rescore as scoring
from scoring.store import registry
from scoring.tasks import resume_rescores_task


class Command(BaseCommand):
    help = "Queue a rescore of the pool on the ml workers (incremental: scored solutions are skipped)."

    def add_arguments(self, parser):
        add_project_argument(parser)
        parser.add_argument("--model", help="model version name, of any project or a public PRM "
                                            "(default: the project's current one)")
        parser.add_argument("--make-current", action="store_true",
                            help="make --model the project's current model first (promotion by hand)")
        parser.add_argument("--wait", action="store_true", help="wait for the job and print progress")
        parser.add_argument("--resume", action="store_true", help="re-dispatch missing chunks of unfinished jobs")
        parser.add_argument("--no-queue", action="store_true", help="score only; do not rebuild the queue")

    def handle(self, *args, model=None, wait=False, resume=False, no_queue=False, make_current=False, **options):
        if resume:
            resume_rescores_task.delay()
            self.stdout.write("Re-dispatching missing chunks of unfinished rescore jobs.")
            return
        project = project_option(options)
        if make_current and not model:
            raise CommandError("--make-current needs --model")
        version = registry.version_for_command(model, project=project)
        if make_current:
            registry.set_current_model(version, project=project)
        job = scoring.start_rescore(model_version=version, project=project, rebuild_queue=not no_queue)
        current = " (now its current model)" if make_current else ""
        self.stdout.write(f"Rescore job {job.pk} of {project.slug} queued for model {version.name}{current}.")
        if wait:
            self.wait(job)

    def wait(self, job: RescoreJob) -> None:
        while True:
            job.refresh_from_db()
            self.stdout.write(
                f"  {job.state}: {job.done}/{job.total} solutions, {job.chunks_done}/{job.chunks_total} chunks"
            )
            if job.is_finished:
                break
            time.sleep(2)
        if job.state == JobState.FAILED:
            raise CommandError(f"rescore job {job.pk} failed: {job.error}")
        self.stdout.write(self.style.SUCCESS(f"Done; queue generation {job.generation}."))
