"""`./stepwise bench bench_scoring [--json] [--model tiny|default|NAME] [--workers 1,2 [--remote]]`: scoring throughput.

On one pool of 8-step solutions, in one run, it measures tokens per second of
  bare        the model forward alone on the batches scoring builds,
  e2e         rescoring as a job's chunks run it (rescore.score_chunk): database read ->
              tokenize -> forward -> database write, the reads and writes beside the forward,
              as the current version,
  per_prefix  the slow loop of one forward per step prefix,
and, on a CPU, e2e with the forward off the CPU at the bare rate (FreeCPUForward: what a chunk's
pipeline keeps of an accelerator's rate)
(tokens = the tokens of the scored solutions, the same count for all three), the seconds of
each stage of one rescore of the pool (read, tokenize, forward, write; each timed alone), the time to
rescore a pool of --pool-size solutions with the tiny test model, and the latency (p50/p95)
of POST /api/score with 1 and 16 items, computed by the running ml worker as in production
(start one first: `celery -A config worker -Q ml`). With --workers, the rescore rate of the
tiny model with that many ml worker processes it starts itself (and through a /pooling
server with --remote; see bench/scaleout.py). Everything it writes is removed at the end.
"""
import json
import random
import tempfile
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from annotate.models import Problem, Project, Solution, Step
from annotate.models.pool import content_hash
from annotate.pool import synthetic
from scoring.models import ModelVersion, SolutionScore, StepScore
from scoring.rescoring import rescore, scores
from scoring.store import registry

STEPS = 8


class Rollback(Exception):
    """Raised to undo everything the benchmark wrote."""


def make_pool(tag: str, n: int) -> list[int]:
    """n word problems of 7 operations, each with its 8-step solution (7 calculations + answer).

    The project's synthetic problems have the length of real grade-school problems, which
    matters here: the per-prefix loop re-reads the problem once per step.
    """
    rng = random.Random(0)
    made = [synthetic.make_problem(rng, n_operations=STEPS - 1) for _ in range(n)]
    problems = Problem.objects.bulk_create(
        Problem(
            statement=m.statement, ground_truth_answer=str(m.answer), content_hash=content_hash("bench", tag, "p", i)
        )
        for i, m in enumerate(made)
    )
    solutions = Solution.objects.bulk_create(
        Solution(problem=p, is_correct=True, content_hash=content_hash("bench", tag, "s", i))
        for i, p in enumerate(problems)
    )
    Step.objects.bulk_create(
        (
            Step(solution=s, index=k, text=text)
            for s, m in zip(solutions, made) for k, text in enumerate(m.correct.steps)
        ),
        batch_size=5000,
    )
    return [s.pk for s in solutions]


def chunks(ids: list[int], size: int):
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


def rescore_rates(version: ModelVersion, ids: list[int], *, rounds: int = 3, per_prefix: bool = True) -> dict:
    """Bare, end-to-end (and per-prefix) tokens/s of a registered version on the pool `ids`.

    The version is made current first: the loop rescores with the current model. The e2e runs
    write scores, deleted before each round; the caller owns the pool and the version
    (bench_scoring rolls both back; bench/gpu_shapes.py runs in a scratch database).
    """
    registry.set_current_model(version, project=Project.objects.sole())
    model = registry.load(version)
    _, _, items = scores.read_items(ids)
    encoded = model.encode_many(items)
    tokens = model.count_tokens(encoded)
    model.forward_only(encoded[:8])  # warm-up: first calls pay one-off costs
    bare, e2e = [], []
    # Alternate the two, best of each: a shared machine's noise hits both alike.
    for _ in range(rounds):
        bare.append(timed(lambda: model.forward_only(encoded), device=model.device))
        forget_scores(version)
        e2e.append(timed(lambda: rescore_pool(version, ids, model), device=model.device))
    rates = {
        "model": version.name, "device": str(model.device), "dtype": str(model.dtype).removeprefix("torch."),
        "solutions": len(ids), "tokens": tokens,
        "bare_tokens_per_s": round(tokens / min(bare), 1),
        "e2e_tokens_per_s": round(tokens / min(e2e), 1),
        "e2e_over_bare": round(min(bare) / min(e2e), 3),
    }
    if model.device.type == "cpu":
        # On a CPU the forward takes every core, so nothing runs beside it; this is the same
        # rescore with the forward off the CPU, as on an accelerator (FreeCPUForward).
        stand_in = FreeCPUForward(model, encoded, seconds_per_token=min(bare) / tokens)
        off_cpu = []
        for _ in range(rounds):
            forget_scores(version)
            off_cpu.append(timed(lambda: rescore_pool(version, ids, stand_in)))
        rates["e2e_over_bare_forward_off_cpu"] = round(min(bare) / min(off_cpu), 3)
    rates["stage_seconds"] = stage_seconds(version, ids, model)
    if per_prefix:
        subset = max(1, len(ids) // 8)
        sub_tokens = model.count_tokens(encoded[:subset])
        seconds = timed(lambda: model.score_per_prefix(items[:subset]), device=model.device)
        rates["per_prefix_tokens_per_s"] = round(sub_tokens / seconds, 1)
        rates["one_pass_over_per_prefix"] = round(rates["bare_tokens_per_s"] / rates["per_prefix_tokens_per_s"], 2)
    return rates


class FreeCPUForward:
    """A forward that leaves the CPU free, as an accelerator's does: it answers with the model's
    own scores and takes the bare forward's time per token asleep. Rescoring beside it (read,
    tokenize, write, on the CPU) then runs as it would beside a GPU, at this model's speed."""

    device = None  # not a CPU: rescore.score_chunk pipelines its batches, as for a GPU

    def __init__(self, model, encoded, *, seconds_per_token: float):
        self.model, self.seconds_per_token = model, seconds_per_token
        results = model.probabilities_for_encoded(encoded)
        self.known = {tuple(e.ids): steps for e, steps in zip(encoded, results)}

    def encode_many(self, items):
        return self.model.encode_many(items)

    def count_tokens(self, encoded) -> int:
        return self.model.count_tokens(encoded)

    def probabilities_for_encoded(self, encoded):
        time.sleep(self.seconds_per_token * self.count_tokens(encoded))
        return [self.known[tuple(e.ids)] for e in encoded]


def stage_seconds(version: ModelVersion, ids: list[int], model) -> dict[str, float]:
    """Where a rescore of the pool in one batch spends its time, each stage timed alone: what
    the e2e rate pays beyond the forward (on a CPU, every stage but the forward takes its cores)."""
    forget_scores(version)
    made: dict = {}  # what each stage hands the next, kept as it is timed
    read = timed(lambda: made.update(read=scores.read_items(ids)))
    solution_ids, step_ids, items = made["read"]
    tokenize = timed(lambda: made.update(encoded=model.encode_many(items)))
    forward = timed(lambda: made.update(results=model.probabilities_for_encoded(made["encoded"])),
                    device=model.device)
    write = timed(lambda: scores.write_scores(model_version=version, solution_ids=solution_ids, step_ids=step_ids,
                                              results=made["results"]))
    return {name: round(seconds, 3) for name, seconds in
            (("read", read), ("tokenize", tokenize), ("forward", forward), ("write", write))}


def forget_scores(version: ModelVersion) -> None:
    """Delete the version's scores, so that the next rescore scores the whole pool again."""
    SolutionScore.objects.filter(model_version=version).delete()
    StepScore.objects.filter(model_version=version).delete()


def rescore_pool(version: ModelVersion, ids: list[int], model) -> None:
    """What a rescore job's chunks do (rescore.score_chunk), one chunk after another."""
    for chunk in chunks(ids, settings.STEPWISE_RESCORE_CHUNK_SIZE):
        rescore.score_chunk(model_version=version, solution_ids=chunk, prm=model)


def timed(run, *, device=None) -> float:
    """Seconds `run` takes; on CUDA until the kernels it queued have finished (they run
    asynchronously: a bare forward that returns early would otherwise look faster than it is)."""
    synchronize(device)
    start = time.perf_counter()
    run()
    synchronize(device)
    return time.perf_counter() - start


def _torch_threads() -> int:
    import torch  # torch: loaded by the rates already

    return torch.get_num_threads()


def synchronize(device) -> None:
    if device is not None and getattr(device, "type", None) == "cuda":
        import torch  # torch: only a run on a GPU gets here

        torch.cuda.synchronize(device)


class Command(BaseCommand):
    help = "Measure bare, end-to-end and per-prefix scoring throughput (tokens/s) on 8-step solutions."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--model", default="tiny", help="tiny (built in-process), default (SmolLM2) or a version name"
        )
        parser.add_argument("--solutions", type=int, default=0, help="pool size for the three rates (default by model)")
        parser.add_argument(
            "--pool-size", type=int, default=10000, help="solutions for the tiny-model rescore timing (0: skip)"
        )
        parser.add_argument("--rounds", type=int, default=3, help="alternating bare/e2e measurements (best of)")
        parser.add_argument("--threads", type=int, default=0,
                            help="torch CPU threads for the rates (0: torch's default, one per core); 1 is "
                                 "a worker started with OMP_NUM_THREADS=1, whose reads overlap its forward")
        parser.add_argument("--api-requests", type=int, default=20,
                            help="POST /api/score calls per batch size, through the ml worker (0: skip)")
        parser.add_argument("--workers", default="",
                            help="rescore with this many ml worker processes each, e.g. 1,2 (tiny model)")
        parser.add_argument("--remote", action="store_true",
                            help="with --workers: also rescore through a /pooling server (bench.pooling_server)")
        parser.add_argument("--scaleout-solutions", type=int, default=256, help="pool size for --workers")
        parser.add_argument("--scaleout-chunk-size", type=int, default=16, help="chunk size for --workers")
        parser.add_argument("--in-process", action="store_true",
                            help="with --workers: also score the pool in as many plain processes, without Celery "
                                 "(bench.score_chunks): what the cores allow, and each one's CPU per solution")
        parser.add_argument("--worker-threads", type=int, default=1,
                            help="torch threads per worker for --workers (0: one per core)")

    def handle(self, *args, **options):
        results: dict = {}
        try:
            with transaction.atomic():
                results.update(self.rates(options))
                if options["pool_size"]:
                    results.update(self.tiny_pool_time(options["pool_size"]))
                raise Rollback
        except Rollback:
            pass
        finally:
            registry.forget_loaded()
        if options["api_requests"]:
            results.update(self.api_latency(options))
        if options["workers"]:
            results.update(self.scaleout(options))
        if options["json"]:
            self.stdout.write(json.dumps(results, indent=2))
        else:
            for key, value in results.items():
                self.stdout.write(f"{key:32} {value}")

    def version(self, name: str, workdir: Path) -> ModelVersion:
        if name == "tiny":
            return self.tiny_version(workdir, "bench-tiny")
        if name == "default":
            from scoring.store import default_model

            return default_model.ensure_default_model()
        return registry.version_for_command(name)

    def tiny_version(self, workdir: Path, name: str, **config) -> ModelVersion:
        from bench.tiny import build_tiny_prm

        folder = build_tiny_prm(workdir / name, kind="head", **config)
        return registry.register_model_version(name=f"{name}-{time.time_ns()}", path=folder)

    def rates(self, options) -> dict:
        from config.celery import allow_tokenizer_threads

        allow_tokenizer_threads()  # as in the worker's pool process, which runs rescoring
        if options["threads"]:
            import torch  # torch: the rates load a model anyway

            torch.set_num_threads(options["threads"])
        with tempfile.TemporaryDirectory() as workdir:
            version = self.version(options["model"], Path(workdir))
            n = options["solutions"] or (64 if options["model"] == "default" else 512)
            rates = rescore_rates(version, make_pool("rates", n), rounds=options["rounds"])
        return rates | {"steps_per_solution": STEPS, "torch_threads": _torch_threads()}

    def tiny_pool_time(self, size: int) -> dict:
        with tempfile.TemporaryDirectory() as workdir:
            version = self.tiny_version(Path(workdir), "bench-pool")
            registry.set_current_model(version, project=Project.objects.sole())  # as rescore_rates
            ids = make_pool("pool", size)
            model = registry.load(version)
            model.forward_only(model.encode_many(scores.read_items(ids[:8])[2]))
            seconds = timed(lambda: rescore_pool(version, ids, model), device=model.device)
        return {"tiny_pool_solutions": size, "tiny_pool_rescore_s": round(seconds, 2)}

    def scaleout(self, options) -> dict:
        """Throughput with N worker processes (bench.scaleout); the pool is committed
        (the workers are other processes) and deleted afterwards."""
        from bench import scaleout as bench_scaleout

        try:
            counts = [int(n) for n in options["workers"].split(",")]
        except ValueError:
            raise CommandError(f"--workers: a comma-separated list of counts, not {options['workers']!r}") from None
        with bench_scaleout.stopped_by_sigterm():
            ids = make_pool(f"scaleout-{time.time_ns()}", options["scaleout_solutions"])
            try:
                return bench_scaleout.measure(
                    counts=counts, pool_ids=ids, remote=options["remote"], chunk_size=options["scaleout_chunk_size"],
                    threads=options["worker_threads"], in_process=options["in_process"],
                    report=lambda key, rate: self.stderr.write(f"{key}: {rate}"),
                )
            finally:
                bench_scaleout.delete_pool(ids)

    def api_latency(self, options) -> dict:
        """p50/p95 of POST /api/score through the worker: the rows it reads are committed
        (the worker is another process), then deleted."""
        from django.contrib.auth import get_user_model
        from django.test import Client

        from annotate.labeling.roles import REVIEWER, grant_role

        with tempfile.TemporaryDirectory() as workdir:
            owned = options["model"] == "tiny"
            version = (
                self.tiny_version(Path(workdir), "bench-api") if owned
                else self.version(options["model"], Path(workdir))
            )
            user = get_user_model().objects.create(username=f"bench-api-{time.time_ns()}")
            grant_role(user, REVIEWER)
            client = Client(SERVER_NAME="localhost")
            client.force_login(user)
            try:
                return self.api_rounds(client, version.name, options["api_requests"])
            finally:
                user.delete()
                if owned:
                    version.delete()

    def api_rounds(self, client, model: str, requests: int) -> dict:
        problem = "What is 12 + 7?"
        steps = ["Add the ones: 2 + 7 = 9.", "Then the tens: 12 + 7 = 19.", "# Answer\n\n19"]
        results: dict = {}
        for size in (1, 16):
            body = {"model": model, "items": [{"problem": problem, "steps": steps}] * size}
            post = lambda body=body: client.post("/api/score", body, content_type="application/json")  # noqa: E731
            warm = post()  # the worker loads the model on its first request
            if warm.status_code != 200:
                return {"api_error": f"{warm.status_code}: {warm.json().get('detail', warm.content[:200])}"}
            times = sorted(timed(post) for _ in range(requests))
            results[f"api_{size}_items_p50_ms"] = round(1000 * times[len(times) // 2], 1)
            results[f"api_{size}_items_p95_ms"] = round(1000 * times[min(len(times) - 1, int(0.95 * len(times)))], 1)
        return results
