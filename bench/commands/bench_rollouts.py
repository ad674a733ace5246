"""`./stepwise bench bench_rollouts [--generator default|tiny|FOLDER] [--problems 4] [--n 4] [--json]`

Rollouts per minute, and OmegaPRM's saving, on real GSM8K test problems: for each problem
its reference solution (steps, then `# Answer`) and a copy with one calculation corrupted
(bench.corruption: a known first error that carries to a wrong answer). Each solution gets
the full Math-Shepherd sweep, then OmegaPRM's binary search over the same rollouts (a cache),
so both see the same completions: the figures are the sweep's rollouts per minute and tokens
per second, the rollouts OmegaPRM used against the sweep's, and how often the two agree on
the first error. It stops starting solutions after --max-seconds. Nothing is written.
"""
import json
import random
import tempfile
import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from bench.corruption import corrupt, gsm8k_steps
from bench.data import DATA
from scoring.generation import rollouts
from scoring.generation.backends import generator_from_spec
from scoring.generation.generators import SamplingParams
from scoring.generation.rollout_labeling import resolve_spec
from steps.answers import strip_calculator_annotations

DEFAULT_DATA = DATA / "gsm8k" / "test.jsonl"


def gsm8k_tasks(path: Path, problems: int, seed: int) -> list[tuple[str, rollouts.RolloutTask]]:
    """(kind, task) for the reference and a corrupted copy of the first `problems` problems."""
    rng, found = random.Random(seed), []
    with path.open() as lines:
        for line in lines:
            record = json.loads(line)
            steps, answer = gsm8k_steps(record["answer"])
            steps = [strip_calculator_annotations(s) for s in steps]
            wrong = corrupt(gsm8k_steps(record["answer"])[0], answer, rng, question=record["question"])
            if wrong is None:
                continue
            for kind, body, stated in (("reference", steps, answer),
                                       ("corrupted", [strip_calculator_annotations(s) for s in wrong.steps],
                                        wrong.answer)):
                found.append((kind, rollouts.RolloutTask(problem=record["question"], answer=answer,
                                                         steps=(*body, f"# Answer\n\n{stated}"))))
            if len(found) >= 2 * problems:
                return found
    return found


class Command(BaseCommand):
    help = "Rollouts per minute and OmegaPRM's saving against the full sweep, on GSM8K test problems."

    def add_arguments(self, parser):
        parser.add_argument("--generator", default="default", help="'default' (SmolLM2), 'tiny', or a model folder")
        parser.add_argument("--data", default=str(DEFAULT_DATA), help="GSM8K JSONL ({question, answer})")
        parser.add_argument("--problems", type=int, default=4)
        parser.add_argument("--n", type=int, default=4)
        parser.add_argument("--max-tokens", type=int, default=96)
        parser.add_argument("--device", help="cpu, cuda, ... (default: the GPU when there is one)")
        parser.add_argument("--max-seconds", type=float, default=150.0, help="start no new solution after this")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--threads", type=int, help="torch CPU threads (1 is fastest on a shared machine)")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **options):
        path = Path(options["data"])
        if not path.exists():
            raise CommandError(f"--data {path}: no such file (GSM8K test JSONL)")
        tasks = gsm8k_tasks(path, options["problems"], options["seed"])
        if options["threads"]:
            import torch

            torch.set_num_threads(options["threads"])
        generator = generator_from_spec(self._spec(options))
        params = SamplingParams(n=options["n"], max_tokens=options["max_tokens"], seed=options["seed"])
        report = measure(tasks, generator, params, max_seconds=options["max_seconds"],
                         progress=lambda line: self.stderr.write(line))
        report["generator"] = generator.name
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2))
            return
        self.stdout.write(
            f"{generator.name}: {report['solutions']} solutions, {report['rollouts']} rollouts in "
            f"{report['seconds']:.1f}s = {report['rollouts_per_minute']:.1f} rollouts/min, "
            f"{report['tokens_per_second']:.1f} generated tokens/s\n"
            f"OmegaPRM used {report['omegaprm_rollouts']} of the sweep's {report['rollouts']} rollouts "
            f"({report['omegaprm_saving']:.0%} saved); same first error as the sweep on "
            f"{report['same_first_error']}/{report['solutions']} solutions")

    def _spec(self, options) -> dict:
        choice = options["generator"]
        if choice == "tiny":
            from bench.tiny import build_tiny_generator

            spec = {"backend": "local", "model": str(build_tiny_generator(Path(tempfile.mkdtemp()) / "tiny"))}
        elif choice == "default":
            spec = resolve_spec({"backend": "local"})
        else:
            spec = {"backend": "local", "model": choice}
        return spec | ({"device": options["device"]} if options["device"] else {})


def measure(tasks, generator, params: SamplingParams, *, max_seconds: float, progress=lambda line: None) -> dict:
    """The sweep then the search on each task, over one cache per task; the sweep is what is timed."""
    seconds, rollouts_done, tokens, omega, same, done = 0.0, 0, 0, 0, 0, []
    for kind, task in tasks:
        if seconds > max_seconds:
            break
        cache = rollouts.RolloutCache(task, generator, params)
        started = time.perf_counter()
        sweep = rollouts.math_shepherd(task, cache)
        seconds += time.perf_counter() - started
        search = rollouts.omegaprm(task, cache)
        rollouts_done, tokens, omega = rollouts_done + sweep.rollouts, tokens + sweep.tokens, omega + search.rollouts
        same += search.first_error == sweep.first_error
        done.append({"kind": kind, "steps": len(task.steps), "k": [s.n_correct for s in sweep.steps],
                     "sweep_first_error": sweep.first_error, "omegaprm_first_error": search.first_error,
                     "omegaprm_rollouts": search.rollouts})
        progress(f"{kind}: K per step {done[-1]['k']}, {sweep.rollouts} rollouts in {seconds:.1f}s so far")
    minutes = seconds / 60 or 1e-9
    return {
        "solutions": len(done), "rollouts": rollouts_done, "seconds": seconds, "n": params.n,
        "max_tokens": params.max_tokens, "rollouts_per_minute": rollouts_done / minutes,
        "tokens_per_second": tokens / seconds if seconds else 0.0, "omegaprm_rollouts": omega,
        "omegaprm_saving": 1 - omega / rollouts_done if rollouts_done else 0.0, "same_first_error": same,
        "per_solution": done,
    }
