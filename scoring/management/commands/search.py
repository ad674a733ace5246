"""`manage.py search PROBLEM --method beam|mcts|aca|best_of_n --max-tokens N [--option KEY=VALUE ...]`

One PRM-guided search in this process, exactly as POST /api/search runs it on the worker:
the project's current PRM (or --model) scores, the generator is the PRM's own backbone unless
--generator names a local causal-LM folder. Prints the chosen solution, its step scores and
the compute spent (--json: the API's answer).
"""
import json

from django.core.management.base import BaseCommand, CommandError

from scoring.management.projects import add_project_argument, project_option
from scoring.search import runs as searching
from scoring.store import registry
from scoring.web.api.serializers import SEARCH_METHODS


def parse_option(text: str) -> tuple[str, object]:
    """KEY=VALUE, the value read as JSON when it is JSON (numbers) and as text otherwise."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise CommandError(f"--option {text!r}: expected KEY=VALUE")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


class Command(BaseCommand):
    help = "Solve one problem by PRM-guided search (best-of-N, beam, MCTS, ACA) within a budget."

    def add_arguments(self, parser):
        parser.add_argument("problem", help="the problem statement")
        parser.add_argument("--method", choices=SEARCH_METHODS, default="beam")
        parser.add_argument("--max-tokens", type=int, required=True, help="budget: most generated tokens")
        parser.add_argument("--max-prm-calls", type=int, help="budget: most PRM calls")
        parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                            help="a method option, e.g. beam_width=4 lookahead=1 aggregation=min (repeatable)")
        add_project_argument(parser)
        parser.add_argument("--model", help="PRM version name (default: the project's current one)")
        parser.add_argument("--generator", help="a local causal-LM folder (default: the PRM's backbone)")
        parser.add_argument("--json", action="store_true", help="print the API's JSON answer")

    def handle(self, *args, **options):
        version = registry.version_for_command(options["model"], project=project_option(options))
        budget = {"max_tokens": options["max_tokens"]}
        if options["max_prm_calls"] is not None:
            budget["max_prm_calls"] = options["max_prm_calls"]
        body = {"problem": options["problem"], "method": options["method"], "budget": budget,
                "options": dict(parse_option(text) for text in options["option"])}
        try:
            generator = searching.generator_for(version, folder=options["generator"]) if options["generator"] else None
            result = searching.run_search(body=body, model_version=version, generator=generator)
        except (ValueError, TypeError, OSError) as error:
            raise CommandError(str(error)) from None
        if options["json"]:
            self.stdout.write(json.dumps(result, indent=2))
            return
        self._print(result)

    def _print(self, result: dict) -> None:
        compute, solution = result["compute"], result["solution"]
        self.stdout.write(f"{result['method']} with {result['model']} on {result['generator']}: "
                          f"{result['stopped']}, {compute['generated_tokens']} tokens generated, "
                          f"{compute['prm_calls']} PRM calls, {result['candidates']} complete candidates")
        if solution is None:
            self.stdout.write("no solution: the budget did not allow one step")
            return
        for index, (step, score) in enumerate(zip(solution["steps"], solution["scores"]), start=1):
            sigma = "" if score["sigma"] is None else f" ± {score['sigma']:.3f}"
            self.stdout.write(f"  {index:2}. [{score['p']:.3f}{sigma}] {step}")
        self.stdout.write(f"answer: {solution['answer']}  (value {solution['value']})")
