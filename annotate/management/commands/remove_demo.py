"""`manage.py remove_demo [--project SLUG]`: delete a project's demo pool, but for the solutions people
labeled (the rule is `annotate.pool.demo.remove`, which the home page's button applies too).
"""
from django.core.management.base import BaseCommand

from annotate.management.projects import add_project_option, project_of
from annotate.pool import demo


class Command(BaseCommand):
    help = "Delete a project's demo problems and solutions that nobody has labeled."

    def add_arguments(self, parser):
        add_project_option(parser)

    def handle(self, *args, **options):
        project = project_of(options)
        removal = demo.remove(project=project)
        kept_note = f"; kept {removal.kept} labeled" if removal.kept else ""
        # seed_demo imports the pool again at the next plain `run`.
        self.stdout.write(
            f"Demo pool of {project.slug}: removed {removal.solutions} solutions to {removal.problems} problems"
            f"{kept_note}. Start with `./stepwise run --no-demo` from now on, or `run` adds it again."
        )
