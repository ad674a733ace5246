"""`manage.py generate_solutions [--project SLUG]`: N samples per problem of a project from a policy
model into the project's pool.

    generate_solutions --source gsm8k --split test --limit 20 -n 8                 # local SmolLM2
    generate_solutions --problem-ids 3,4 -n 4 --backend openai --base-url http://127.0.0.1:8000/v1 --model M

Runs in this process by default (the run's row shows its progress on the page too);
`--background` hands it to the ml workers instead.
"""
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from scoring.generation import runs as generation
from scoring.generation.generators import DEFAULT_PROMPT_TEMPLATE
from scoring.management.projects import add_project_argument, project_option


class Command(BaseCommand):
    help = "Generate N solutions per problem with a local model or an OpenAI-compatible server."

    def add_arguments(self, parser):
        add_project_argument(parser)
        parser.add_argument("--problem-ids", help="comma-separated problem ids (else --source/--split/--limit)")
        parser.add_argument("--source")
        parser.add_argument("--split")
        parser.add_argument("--limit", type=int)
        parser.add_argument("-n", "--samples", type=int, default=4, help="samples per problem")
        parser.add_argument("--backend", choices=["local", "openai"], default="local")
        parser.add_argument("--model", help="local: a model folder (default SmolLM2); openai: the model id")
        parser.add_argument("--base-url", help="openai: the server's base URL, e.g. http://127.0.0.1:8000/v1")
        parser.add_argument("--mode", choices=["completions", "chat"], default="completions")
        parser.add_argument("--concurrency", type=int, default=8)
        parser.add_argument("--temperature", type=float, default=0.7)
        parser.add_argument("--top-p", type=float, default=0.95)
        parser.add_argument("--max-tokens", type=int, default=512)
        parser.add_argument("--seed", type=int)
        parser.add_argument("--prompt-template", type=Path, help="a file with the template ({problem} in it)")
        parser.add_argument("--split-mode", default="blank_line")
        parser.add_argument("--chunk-size", type=int, default=8, help="problems per chunk")
        parser.add_argument("--background", action="store_true", help="queue for the workers, do not wait")

    def handle(self, *args, **options):
        project = project_option(options)
        try:
            run = generation.start_generation_run(
                project=project, problem_filter=problem_filter(options), samples_per_problem=options["samples"],
                generator_spec=generator_spec(options), seed=options["seed"], split_mode=options["split_mode"],
                sampling={"temperature": options["temperature"], "top_p": options["top_p"],
                          "max_tokens": options["max_tokens"]},
                prompt_template=options["prompt_template"].read_text() if options["prompt_template"]
                else DEFAULT_PROMPT_TEMPLATE,
                chunk_size=options["chunk_size"], enqueue=options["background"],
            )
        except (ValueError, OSError) as error:
            raise CommandError(str(error)) from None
        if options["background"]:
            self.stdout.write(f"Generation run {run.pk} queued for the ml workers.")
            return
        run = generation.run_generation(run_id=run.pk)
        self.stdout.write(
            f"Generation run {run.pk} {run.state}: {run.done}/{run.total} problems, {run.created} new solutions, "
            f"{run.duplicates} duplicate samples, {run.skipped} skipped, {run.queued} queued; "
            f"{run.prompt_tokens} prompt + {run.completion_tokens} completion tokens, {run.retries} retries."
        )
        if run.error:
            raise CommandError(run.error)


def problem_filter(options: dict) -> dict:
    if options["problem_ids"]:
        try:
            return {"problem_ids": [int(pk) for pk in options["problem_ids"].split(",") if pk.strip()]}
        except ValueError:
            raise CommandError("--problem-ids: comma-separated integers expected") from None
    return {key: options[key] for key in ("source", "split", "limit") if options[key]}


def generator_spec(options: dict) -> dict:
    if options["backend"] == "local":
        return {"backend": "local", **({"model": options["model"]} if options["model"] else {})}
    if not options["base_url"] or not options["model"]:
        raise CommandError("--backend openai needs --base-url and --model")
    return {"backend": "openai", "base_url": options["base_url"], "model": options["model"], "mode": options["mode"],
            "concurrency": options["concurrency"]}
