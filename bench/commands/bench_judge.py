"""`./stepwise bench bench_judge [--limit 8] [--max-tokens 64] [--template FILE] [--model FOLDER]
[--base-url URL --served-model M] [--in-place] [--json]`

A verifier model as judge on real Qwen2.5-Math responses (bench.judge_plumbing), end to end: the
responses imported, the product's judge job run in-process (as `label_judge --inline`), then what
it stored, shown (the sources reader and its API) and exported (`--labels judge`: soft, trl,
openrlhf, critique). The judges, each on a project of its own holding the same solutions:

- `local`: the local model (default SmolLM2-135M-Instruct) asked with the raw prompt;
- `server`: the same model behind the stand-in server (bench.openai_server, chat mode, logprobs),
  with the default template and with --template (default: bench/prompts/judge_by_example.txt, the
  form shown by a worked example);
- `scripted`: the stand-in server serving scripted answers (two in the form, one with logprobs;
  one in no form; one cut short): the plumbing under a judge that keeps to the form;
- with --base-url: a real verifier (vLLM, SGLang, ...), with both templates.

Per judge: answers stored, parsed share, unparseable answers by reason, tokens, seconds per
solution, the share of verdicts whose probability came from logprobs; then the plumbing and how
often "no error found" agrees with the response's published correctness. Runs in a scratch
database (dropped afterwards) unless --in-place, which needs a database without solutions.
"""
from __future__ import annotations

import json
import tempfile
from contextlib import ExitStack
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from annotate.models import Project, Solution
from bench import judge_plumbing
from bench.openai_server import ServerProcess
from scoring.generation.generators import SamplingParams, default_generator_folder
from steps import verification

EXAMPLE_TEMPLATE = Path(__file__).resolve().parent.parent / "prompts" / "judge_by_example.txt"


class Command(BaseCommand):
    help = ("A judge (local model, the stand-in server, a real verifier) on real responses: parsed, stored, shown, "
            "exported.")

    def add_arguments(self, parser):
        parser.add_argument("--limit", type=int, default=8,
                            help="responses imported and judged (wrong and right in turn)")
        parser.add_argument("--max-tokens", type=int, default=64, help="the most tokens of one judge answer")
        parser.add_argument("--template", default=str(EXAMPLE_TEMPLATE),
                            help="a second prompt template (a file with {problem} and {steps}) the servers are "
                                 "asked with")
        parser.add_argument("--model", help="the local judge model folder (default: SmolLM2-135M-Instruct)")
        parser.add_argument("--base-url", help="a real verifier's OpenAI-compatible URL")
        parser.add_argument("--served-model", help="with --base-url: the model id")
        parser.add_argument("--mode", default="chat", choices=("chat", "completions"), help="the servers' protocol")
        parser.add_argument("--threads", type=int, default=1, help="torch CPU threads, here and in the server")
        parser.add_argument("--in-place", action="store_true", help="use the configured database (no solutions in it)")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **options):
        if options["base_url"] and not options["served_model"]:
            raise CommandError("--base-url needs --served-model")
        try:
            template = verification.check_template(Path(options["template"]).read_text())
        except (OSError, ValueError) as error:
            raise CommandError(f"--template: {error}") from None
        import torch

        torch.set_num_threads(options["threads"])
        folder = Path(options["model"] or default_generator_folder())
        with ExitStack() as stack:
            if not options["in_place"]:
                from bench.simulation import scratch_database

                stack.enter_context(scratch_database())
            elif Solution.objects.exists():
                raise CommandError("--in-place needs a database without solutions (the bench imports its own)")
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-judge-")))
            reports = [self._measure(arm, work, options) for arm in self._arms(stack, folder, template, work, options)]
        self._print(reports, options)

    def _arms(self, stack: ExitStack, folder: Path, template: str, work: Path, options):
        """The judges in turn; each server is started when its judge is reached (one process at a time)."""
        default = ("default", verification.DEFAULT_TEMPLATE)
        second = (Path(options["template"]).name, template)
        yield judge_plumbing.Arm("local", {"backend": "local", "model": str(folder)}, default[1], default[0])
        server = stack.enter_context(ServerProcess(folder, threads=options["threads"]))
        for name, text in (default, second):
            yield judge_plumbing.Arm(f"server ({options['mode']})", self._spec(server.base_url, server.model_name,
                                                                              options), text, name)
        server.stop()
        answers = work / "answers.json"
        answers.write_text(json.dumps(judge_plumbing.scripted_answers()))
        scripted = stack.enter_context(ServerProcess(folder, "--answers", str(answers), threads=options["threads"]))
        yield judge_plumbing.Arm("scripted", self._spec(scripted.base_url, scripted.model_name, options), default[1],
                                 default[0], scripted=True)
        scripted.stop()
        if options["base_url"]:
            for name, text in (default, second):
                spec = self._spec(options["base_url"], options["served_model"], options)
                yield judge_plumbing.Arm(options["served_model"], spec, text, name)

    def _spec(self, url: str, model: str, options) -> dict:
        return {"backend": "openai", "base_url": url, "model": model, "mode": options["mode"], "concurrency": 1,
                "timeout": 600}

    def _measure(self, arm: judge_plumbing.Arm, work: Path, options) -> dict:
        project = Project.objects.create(slug=f"judge-{Project.objects.count()}",
                                         name=f"{arm.name}, {arm.template_name}")
        lines = judge_plumbing.pool_lines(limit=options["limit"])
        judge_plumbing.import_into(project, lines, work)
        params = SamplingParams(temperature=0.0, top_p=1.0, max_tokens=options["max_tokens"])
        job, recorder, seconds = judge_plumbing.run_arm(arm, project=project, params=params)
        self.stderr.write(f"{arm.name}, {arm.template_name}: {job.state}, {job.done} answered in {seconds:.0f}s")
        return {"judge": arm.name, "template": arm.template_name, "scripted": arm.scripted,
                **judge_plumbing.answer_figures(job, recorder, seconds),
                "shown": judge_plumbing.shown(project, job.run_id),
                "exports": judge_plumbing.exported(project, work),
                "agreement": judge_plumbing.agreement(job.run_id)}

    def _print(self, reports: list[dict], options) -> None:
        if options["json"]:
            self.stdout.write(json.dumps(reports, indent=2))
            return
        self.stdout.write(f"{options['limit']} real Qwen2.5-Math responses per judge, "
                          f"max_tokens {options['max_tokens']}")
        for report in reports:
            self.stdout.write(describe(report))


def describe(report: dict) -> str:
    """One judge's figures, a few lines."""
    reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(report["reasons"].items())) or "none"
    logprobs = "n/a" if report["logprob_share"] is None else f"{report['logprob_share']:.0%}"
    shown, agreement = report["shown"], report["agreement"]
    exports = ", ".join(f"{name} {found['rows']} rows/{found['steps']} steps"
                        for name, found in report["exports"].items())
    seen = ("no parsed solution to show" if shown["solution"] is None else
            f"solution {shown['solution']}: {shown['shown']}/{shown['stored']} judged steps shown "
            f"({shown['with_critique']} with critique), reader {'matches' if shown['reader_matches'] else 'DIFFERS'}, "
            f"API {'matches' if shown['api_matches'] else 'DIFFERS'}")
    agree = ("n=0" if not agreement["n"] else
             f"{agreement['agree']}/{agreement['n']} ({agreement['share']:.0%})")
    return (f"\n{report['judge']}{' [scripted answers]' if report['scripted'] else ''}, template {report['template']}: "
            f"{report['state']}, {report['answers']}/{report['solutions']} answers stored, "
            f"{report['parsed']} parsed ({report['parsed_share']:.0%})\n"
            f"  unparseable by reason: {reasons}\n"
            f"  tokens: {report['prompt_tokens']} prompt, {report['completion_tokens']} completion; "
            f"{report['seconds_per_solution']:.1f} s/solution; verdicts {report['verdicts']}, "
            f"probability from logprobs {logprobs} ({report['answers_with_logprobs']} answers came with logprobs)\n"
            f"  shown: {seen}\n  exported (--labels judge): {exports}\n"
            f"  'no error found' agrees with the published score: {agree}")
