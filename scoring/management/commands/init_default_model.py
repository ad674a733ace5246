"""`manage.py init_default_model [--project SLUG] [--rescore]`: build generation 0 (SmolLM2 + untrained
head) offline, once, as a public PRM; current in the project unless it has a current model."""
from django.core.management.base import BaseCommand, CommandError

from scoring.management.projects import add_project_argument, project_option
from scoring.rescoring import rescore as scoring
from scoring.store import default_model, registry


class Command(BaseCommand):
    help = "Convert the bundled SmolLM2-135M-Instruct GGUF to safetensors and register it (idempotent)."

    def add_arguments(self, parser):
        add_project_argument(parser)
        parser.add_argument("--rescore", action="store_true",
                            help="then queue an (incremental) rescore of the project's pool with its current model")

    def handle(self, *args, rescore=False, **options):
        project = project_option(options)
        try:
            version = default_model.ensure_default_model(project=project)
        except FileNotFoundError as error:
            raise CommandError(str(error)) from None
        model = registry.current_model(project) or version
        current = f" (current in {project.slug})" if model == version else ""
        line = f"Default model: {version.name}{current} at {version.path}"
        if rescore:
            job = scoring.start_rescore(model_version=model, project=project)
            # One line: the job only scores what this model has not scored yet.
            line += f"; rescore job {job.pk} with {model.name} queued for the ml worker"
        self.stdout.write(line + ".")
