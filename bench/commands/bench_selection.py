"""`./stepwise bench bench_selection [--solutions 50000] [--labels 200] [--new-labels 20] [--model tiny|NAME]`

Wall time of `selection.rebuild_queue` with the default shares (ensemble disagreement) on a
large synthetic pool, in the states production meets it:

  cold          no stored ensemble and an empty feature cache: the first rebuild after a
                model change (one backbone pass over the pool, a fit, the pool's uncertainties);
  no artifact   features cached, nothing stored: what *every* rebuild cost before the ensemble
                was stored (it refitted and re-read every pool solution's features each time);
  warm          the stored ensemble and uncertainties reused (the labels did not change);
  new labels    --new-labels more labels: a refit on cached features, the pool's numbers again;
  warm again    after that.

The pool (source "bench-selection", the project's synthetic problems with corrupted variants)
is scored once by the model and labeled through the real queue; both are kept for later runs,
so a database holding other solutions is refused unless --force. The feature cache and the
ensembles live in their own folder under the data dir, so the cold run clears only the
benchmark's. `--model tiny` (default) builds the tiny test model: the database and file costs
are the pool's, the backbone pass is the tiny model's; name a registered version to time a
real backbone's pass.
"""
from __future__ import annotations

import os
import shutil
import time
from math import ceil

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.test import override_settings

from annotate.labeling import roles
from annotate.models import Annotation, Project, Solution
from bench import simulation, simulation_pool
from scoring.models import ModelVersion
from scoring.rescoring import ensemble, label_rows, scores, selection
from scoring.store import registry

SOURCE = "bench-selection"
TINY_NAME = "bench-selection-tiny"
DISAGREEMENT = {"disagreement": 1.0}


class Command(BaseCommand):
    help = "rebuild_queue wall time on a large pool: cold, without a stored ensemble, warm, after new labels"

    def add_arguments(self, parser):
        parser.add_argument("--solutions", type=int, default=50_000, help="Pool size (built once, kept)")
        parser.add_argument("--labels", type=int, default=200, help="Labeled solutions before timing")
        parser.add_argument("--new-labels", type=int, default=20, help="Labels added before the refit")
        parser.add_argument("--model", default="tiny", help="'tiny' (built here) or a registered version's name")
        parser.add_argument("--no-score", action="store_true",
                            help="Leave the pool unscored (scoring 50k solutions on a loaded 2-core machine takes "
                                 "longer than the benchmark; the rebuild then ranks no score rows)")
        parser.add_argument("--force", action="store_true", help="Run on a database that holds other solutions")

    def handle(self, *args, solutions: int, labels: int, new_labels: int, model: str, no_score: bool, force: bool,
               **options):
        if not force and Solution.objects.exclude(source=SOURCE).exists():
            raise CommandError("this database holds other solutions; run on a scratch database or pass --force")
        root = settings.DATA_DIR / SOURCE
        with override_settings(FEATURE_CACHE_DIR=root / "feature-cache", ENSEMBLES_DIR=root / "ensembles"):
            version = self.model_version(model, root)
            built = self.build_pool(solutions)
            annotator = self.annotator()
            if not no_score:
                self.score(version)
            self.label(version, annotator, labels)
            self.stdout.write(f"rebuild_queue on {Solution.objects.filter(source=SOURCE).count():,} solutions "
                              f"({built}), {Annotation.objects.submitted().count():,} labeled, model {version.name}; "
                              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
            self.stdout.write(f"{'state':<12} {'seconds':>8} {'fits':>5} {'computed':>9}  (queue of "
                              f"{settings.STEPWISE_QUEUE_SIZE}, shares disagreement=1)")
            shutil.rmtree(root / "feature-cache", ignore_errors=True)
            shutil.rmtree(root / "ensembles", ignore_errors=True)
            self.timed("cold", version)
            self.timed("warm", version)
            shutil.rmtree(root / "ensembles")
            self.timed("no artifact", version)
            self.timed("warm", version)
            self.label(version, annotator, labels + new_labels)
            self.timed("new labels", version)
            self.timed("warm again", version)
        rows = time.perf_counter()
        label_rows.gather_rows()
        self.stdout.write(f"of which reading the labeled rows (gather_rows, every rebuild): "
                          f"{time.perf_counter() - rows:.2f} s")

    def timed(self, state: str, version: ModelVersion) -> None:
        counts = Counting()
        with counts:
            started = time.perf_counter()
            project = Project.objects.sole()
            selection.rebuild_queue(model_version=version, project=project,
                                    policy=selection.Policy.of(project, shares=DISAGREEMENT))
            seconds = time.perf_counter() - started
        self.stdout.write(f"{state:<12} {seconds:>8.2f} {counts.fits:>5} {counts.computed:>9,}")

    def model_version(self, model: str, root) -> ModelVersion:
        if model != "tiny":
            version = registry.find_version(model)
            if version is None:
                raise CommandError(f"--model {model!r}: no such model version")
            return version
        existing = ModelVersion.objects.filter(name=TINY_NAME).first()
        if existing is not None:
            return existing
        from bench.tiny import build_tiny_prm

        return registry.register_model_version(name=TINY_NAME, path=build_tiny_prm(root / "tiny-prm"))

    def build_pool(self, n: int) -> str:
        """The synthetic pool of n solutions (once), scored by nothing yet; returns what was done."""
        have = Solution.objects.filter(source=SOURCE).count()
        if have >= n:
            return "pool kept from an earlier run"
        if have:
            raise CommandError(f"the benchmark pool has {have:,} solutions, fewer than --solutions {n:,}: "
                               "run on a fresh database for a larger pool")
        started = time.perf_counter()
        # About 3.5 distinct solutions per synthetic problem (its reference and corrupted variants).
        problems, _ = simulation_pool.make_problems(pool="synthetic", data=None, n_pool=ceil(n / 3), n_heldout=0)
        kept, count = [], 0
        for problem in problems:
            if count >= n:
                break
            kept.append(problem)
            count += len(problem.solutions)
        simulation_pool.write_problems(kept, split="pool", source=SOURCE)
        return f"pool built in {time.perf_counter() - started:.0f} s"

    def annotator(self):
        user, _ = get_user_model().objects.get_or_create(username="bench-selection")
        roles.grant_role(user, roles.ANNOTATOR)
        return user

    def score(self, version: ModelVersion) -> None:
        """Score the pool by the model, once (scores persist): a rebuild follows a rescore in production."""
        ids = list(Solution.objects.filter(source=SOURCE).values_list("pk", flat=True))
        started = time.perf_counter()
        for start in range(0, len(ids), 5000):
            scores.score_solutions(model_version=version, solution_ids=ids[start:start + 5000])
        if time.perf_counter() - started > 1:
            self.stdout.write(f"scored the pool in {time.perf_counter() - started:.0f} s")

    def label(self, version: ModelVersion, annotator, target: int) -> None:
        """Label until `target` solutions are labeled, through the real queue and labeling code."""
        missing = target - Annotation.objects.submitted().count()
        if missing > 0:
            project = Project.objects.sole()
            random_picks = selection.Policy.of(project, size=missing, shares={"random": 1.0})
            selection.rebuild_queue(model_version=version, project=project, policy=random_picks)
            simulation.label_queue(annotator=annotator, limit=missing)


class Counting:
    """Counts ensemble fits and pool solutions whose uncertainties were computed (not read from
    the stored file) inside a `with` block: the stages a rebuild's time goes to."""

    def __enter__(self):
        self.fits, self.computed = 0, 0
        self.saved = ensemble.fit_from_rows, ensemble.pool_uncertainty

        def fit(*args, **kwargs):
            self.fits += 1
            return self.saved[0](*args, **kwargs)

        def pool(ens, solution_ids, **kwargs):
            self.computed += len(solution_ids)
            return self.saved[1](ens, solution_ids, **kwargs)

        ensemble.fit_from_rows, ensemble.pool_uncertainty = fit, pool
        return self

    def __exit__(self, *exc):
        ensemble.fit_from_rows, ensemble.pool_uncertainty = self.saved
