"""`manage.py label_judge [--project SLUG] [--generator default|FOLDER|JSON] [--solution-ids IDS] [--limit N]
[--max-tokens N] [--temperature T] [--inline]`

Asks a verifier model (a judge: an OpenAI-compatible server or a local model) for each step's
verdict and a short critique, into a new AutoLabelRun of method judge (kept apart from human and
rollout labels). Solutions: --solution-ids, --limit; only those with steps, not gold or reference
items. The prompt is STEPWISE_JUDGE_PROMPT (default: a ThinkPRM-style template). By default the job
is queued for a worker on the `ml` queue (and resumes after a crash); --inline runs it here.
"""
from django.core.management.base import BaseCommand, CommandError

from scoring.generation import judge_labeling
from scoring.generation.generators import SamplingParams
from scoring.generation.labeling_jobs import run_here, solution_ids_option, spec_from_option
from scoring.management.projects import add_project_argument, project_option
from scoring.models import JudgeLabelJob


class Command(BaseCommand):
    help = "Label solutions' steps with a verifier model's verdicts and critiques (a judge)."

    def add_arguments(self, parser):
        add_project_argument(parser)
        parser.add_argument("--generator", default="default",
                            help="'default' (SmolLM2), a local model folder, or a JSON generator spec "
                                 '(e.g. {"backend": "openai", "base_url": ..., "model": ..., "mode": "chat"})')
        parser.add_argument("--solution-ids", default="", help="comma-separated solution ids")
        parser.add_argument("--limit", type=int, help="at most this many solutions")
        parser.add_argument("--max-tokens", type=int, default=judge_labeling.DEFAULT_PARAMS.max_tokens,
                            help="the most tokens of one answer (a longer one is cut, and unparseable)")
        parser.add_argument("--temperature", type=float, default=0.0)
        parser.add_argument("--inline", action="store_true", help="run here instead of on a worker")

    def handle(self, *args, **options):
        project = project_option(options)
        try:
            params = SamplingParams(max_tokens=options["max_tokens"], temperature=options["temperature"], top_p=1.0)
            job = judge_labeling.start_judge_labeling(
                project=project, solution_ids=solution_ids_option(options["solution_ids"]), limit=options["limit"],
                generator_spec=spec_from_option(options["generator"]), params=params, enqueue=not options["inline"])
        except ValueError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"run {job.run_id}: {job.total} solutions to judge ({job.skipped} skipped), job {job.pk}")
        if options["inline"]:
            run_here(judge_labeling.run_judge_job, job_id=job.pk)
            self._report(JudgeLabelJob.objects.select_related("run").get(pk=job.pk))

    def _report(self, job: JudgeLabelJob) -> None:
        if job.state != "succeeded":
            raise CommandError(f"job {job.pk} {job.state}: {job.error}")
        self.stdout.write(f"judged {job.done} solutions: {job.done - job.unparseable} answers read, "
                          f"{job.unparseable} unparseable (kept raw); {job.run.tokens} tokens generated")
