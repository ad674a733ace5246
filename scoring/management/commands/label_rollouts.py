"""`manage.py label_rollouts [--project SLUG] [--method math_shepherd|omegaprm] [--n N]
[--generator default|FOLDER|JSON] ...`

Labels a project's pool solutions automatically by rollouts into a new AutoLabelRun (kept apart from
human labels). Solutions: --solution-ids, --source, --unlabeled (no submitted human label),
--limit; only those with steps and a known answer are labeled. By default the job is queued
for a worker on the `ml` queue (and resumes after a crash); --inline runs it here.
"""
from django.core.management.base import BaseCommand, CommandError

from scoring.generation import rollout_labeling, rollouts
from scoring.generation.generators import SamplingParams
from scoring.generation.labeling_jobs import run_here, solution_ids_option, spec_from_option
from scoring.management.projects import add_project_argument, project_option
from scoring.models import RolloutLabelJob


class Command(BaseCommand):
    help = "Label solutions' steps automatically by rollouts (Math-Shepherd or OmegaPRM)."

    def add_arguments(self, parser):
        add_project_argument(parser)
        parser.add_argument("--method", choices=rollouts.METHODS, default="math_shepherd")
        parser.add_argument("--n", type=int, default=8, help="completions per rolled-out prefix")
        parser.add_argument("--generator", default="default",
                            help="'default' (SmolLM2), a local model folder, or a JSON generator spec")
        parser.add_argument("--solution-ids", default="", help="comma-separated solution ids")
        parser.add_argument("--source", help="only solutions imported with this source")
        parser.add_argument("--unlabeled", action="store_true", help="only solutions without a human label")
        parser.add_argument("--limit", type=int, help="at most this many solutions")
        parser.add_argument("--max-tokens", type=int, default=256)
        parser.add_argument("--temperature", type=float, default=0.7)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--inline", action="store_true", help="run here instead of on a worker")

    def handle(self, *args, **options):
        project = project_option(options)
        try:
            params = SamplingParams(n=options["n"], max_tokens=options["max_tokens"],
                                    temperature=options["temperature"], seed=options["seed"])
            job = rollout_labeling.start_rollout_labeling(
                project=project, method=options["method"], n=options["n"],
                solution_ids=solution_ids_option(options["solution_ids"]),
                source=options["source"], unlabeled=options["unlabeled"], limit=options["limit"],
                generator_spec=spec_from_option(options["generator"]), params=params,
                enqueue=not options["inline"],
            )
        except ValueError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"run {job.run_id}: {job.total} solutions to label ({job.skipped} skipped), job {job.pk}")
        if options["inline"]:
            run_here(rollout_labeling.run_rollout_job, job_id=job.pk)
            self._report(RolloutLabelJob.objects.select_related("run").get(pk=job.pk))

    def _report(self, job: RolloutLabelJob) -> None:
        if job.state != "succeeded":
            raise CommandError(f"job {job.pk} {job.state}: {job.error}")
        run = job.run
        saving = 1 - run.rollouts / job.full_sweep_rollouts if job.full_sweep_rollouts else 0.0
        self.stdout.write(f"labeled {job.done} solutions: {run.rollouts} rollouts, {run.tokens} tokens; "
                          f"the full sweep would take {job.full_sweep_rollouts} ({saving:.0%} saved)")

