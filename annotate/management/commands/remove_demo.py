"""`manage.py remove_demo`: delete the demo pool seed_demo made, but for the solutions people
labeled (the rule is `annotate.pool.demo.remove`, which the home page's button applies too).
"""
from django.core.management.base import BaseCommand

from annotate.pool import demo


class Command(BaseCommand):
    help = "Delete the demo problems and solutions that nobody has labeled."

    def handle(self, *args, **options):
        removal = demo.remove()
        kept_note = f"; kept {removal.kept} labeled" if removal.kept else ""
        # seed_demo imports the pool again at the next plain `run`.
        self.stdout.write(
            f"Demo pool: removed {removal.solutions} solutions to {removal.problems} problems{kept_note}. "
            "Start with `./stepwise run --no-demo` from now on, or `run` adds it again."
        )
