"""`manage.py init_default_model [--project SLUG] [--rescore]`: build generation 0 (SmolLM2 + untrained
head) offline, once, as a public PRM (in no project), and make it current in the project, or without
--project in every project, that has no current model; --rescore then rescores each of those
projects' pools with its current model. The start script runs it once for the whole site."""
from django.core.management.base import BaseCommand, CommandError

from annotate.models import Project
from scoring.management.projects import add_project_argument, project_option
from scoring.rescoring import rescore as scoring
from scoring.store import default_model, registry


class Command(BaseCommand):
    help = "Convert the bundled SmolLM2-135M-Instruct GGUF to safetensors and register it (idempotent)."

    def add_arguments(self, parser):
        add_project_argument(parser)
        parser.add_argument("--rescore", action="store_true",
                            help="then queue an (incremental) rescore of each project's pool with its current model")

    def handle(self, *args, rescore=False, **options):
        projects = [project_option(options)] if options.get("project") else self.every_project()
        try:
            version = default_model.ensure_default_model()
            for project in projects:
                default_model.ensure_default_model(project=project)
        except FileNotFoundError as error:
            raise CommandError(str(error)) from None
        serving = [project.slug for project in projects if registry.current_model(project) == version]
        current = f" (current in {', '.join(serving)})" if serving else ""
        line = f"Default model: {version.name}{current} at {version.path}"
        if rescore:
            line += self.rescore_line(projects)
        self.stdout.write(line + ".")

    @staticmethod
    def rescore_line(projects: list[Project]) -> str:
        # One line: each job only scores what its model has not scored yet.
        jobs = {project: scoring.rescore_at_start(project=project) for project in projects}
        started = [str(job.pk) for job in jobs.values() if job is not None]
        line = f"; rescore job{'s' if len(started) > 1 else ''} {', '.join(started)} queued for the ml worker" \
            if started else "; no rescore queued"
        cancelled = [project.slug for project, job in jobs.items()
                     if job is None and registry.current_model(project) is not None]
        if cancelled:
            line += f" (last rescore cancelled in {', '.join(cancelled)}: start one from its models page)"
        return line

    @staticmethod
    def every_project() -> list[Project]:
        return list(Project.objects.order_by("slug")) or [Project.objects.sole()]
