"""`manage.py remove_demo`: delete the demo pool seed_demo made, but for the solutions people labeled.

A solution with an annotation, submitted or in progress, holds someone's work: it stays, and so
does its problem. Scores, steps and queue items go with the solutions they belong to.
"""
from django.core.management.base import BaseCommand
from django.db import transaction

from annotate.models import Problem, Solution
from annotate.models.pool import DEMO_SOURCE


class Command(BaseCommand):
    help = "Delete the demo problems and solutions that nobody has labeled."

    def handle(self, *args, **options):
        with transaction.atomic():
            unlabeled = Solution.objects.filter(source=DEMO_SOURCE, annotations__isnull=True)
            solutions = unlabeled.count()
            unlabeled.delete()
            empty = Problem.objects.filter(source=DEMO_SOURCE, solutions__isnull=True)
            problems = empty.count()
            empty.delete()
        kept = Solution.objects.filter(source=DEMO_SOURCE).count()
        kept_note = f"; kept {kept} labeled" if kept else ""
        # seed_demo imports the pool again at the next plain `run`.
        self.stdout.write(
            f"Demo pool: removed {solutions} solutions to {problems} problems{kept_note}. "
            "Start with `./stepwise run --no-demo` from now on, or `run` adds it again."
        )
