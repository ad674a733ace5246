#!/usr/bin/env python
"""Speed and memory of Stepwise on 1.5B- and 7B-shaped backbones (random weights), for a machine with a GPU.

For each shape (Qwen2.5-1.5B: hidden 1536, 28 layers, 12 heads, 2 KV heads, MLP 8960; Qwen2.5-7B:
hidden 3584, 28 layers, 28 heads, 4 KV heads, MLP 18944; `tiny` for a CPU smoke test) it writes a
random-weight backbone folder (safetensors; bf16 on CUDA, float32 on a CPU, the scoring precision
rule), registers a `head` model over it and measures, stage by stage:

    build            writing the backbone folder (parameters, seconds)
    rescoring        bare forward tokens/s (CUDA-synchronised) and end-to-end rescoring of a
                     database pool (read, tokenize, forward, write: bench_scoring.rescore_rates),
                     and e2e ÷ bare
    train_head       the product's training (scoring.core.training.train), head mode: backbone
                     feature tokens/s, then head optimizer steps/s
    train_lora       the same with LoRA through the backbone: optimizer steps/s and tokens/s
    active_learning  a short `simulate_active_learning --scale` run (few budgets, one seed):
                     featurizing tokens/s and the selection loop's seconds
    search           a short `eval_search` curve (best-of-N, beam) of the shape's PRM over a tiny
                     generator: generated tokens/s and PRM calls/s

with each stage's peak memory (torch.cuda.max_memory_allocated on CUDA, peak RSS on a CPU).
Random weights measure speed and memory, never accuracy. The vocabulary is --tokenizer's, else
SmolLM2's (the default model's converted backbone, with the step marker) where it is at hand,
else bench.tiny's; the JSON says which. The pool and training rows are GSM8K lines from --data when
present, else the project's synthetic word problems. Everything runs in a scratch database
(bench.simulation.scratch_database) and a work folder; nothing of the app's data is touched.

The run keeps within --budget-seconds: each shape gets an even share of what is left, and a
stage that would start after its shape's share is skipped with a line saying so.

    python bench/gpu_shapes.py --shape 1.5b,7b --out gpu-shapes     # on a GPU: under 10 minutes
    python bench/gpu_shapes.py --shape tiny                         # a CPU smoke test: about a minute

Writes `<out>/gpu-shapes.json` (after every stage, so a stopped run keeps what it measured) and
prints a table.
"""
from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import os
import secrets
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.data import DATA  # noqa: E402 (after the path above)


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    tie_embeddings: bool


@dataclass(frozen=True)
class Sizes:
    """How much work each stage does for a shape: enough for steady rates, small enough for the budget."""

    pool_problems: int  # rescoring pool (about 3 solutions each)
    rounds: int  # alternating bare/e2e measurements, best of
    train_problems: int  # training rows: about 3 solutions each
    batch_size: int  # solutions per LoRA step
    head_epochs: int
    lora_epochs: int
    al_problems: int
    al_heldout: int
    al_budgets: tuple[int, ...]
    al_seeds: tuple[int, ...]
    al_members: int
    search_problems: int
    search_ns: str
    search_tokens: int  # per whole solution
    search_beams: str
    search_beam_tokens: int


SHAPES = {
    "tiny": Shape(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, tie_embeddings=False),
    "1.5b": Shape(hidden=1536, layers=28, heads=12, kv_heads=2, intermediate=8960, tie_embeddings=True),
    "7b": Shape(hidden=3584, layers=28, heads=28, kv_heads=4, intermediate=18944, tie_embeddings=False),
}
SIZES = {
    "tiny": Sizes(pool_problems=16, rounds=2, train_problems=8, batch_size=4, head_epochs=5, lora_epochs=1,
                  al_problems=30, al_heldout=8, al_budgets=(10, 20, 40), al_seeds=(0,), al_members=3,
                  search_problems=2, search_ns="1,2", search_tokens=12, search_beams="1x2", search_beam_tokens=40),
    "1.5b": Sizes(pool_problems=200, rounds=3, train_problems=32, batch_size=8, head_epochs=30, lora_epochs=1,
                  al_problems=200, al_heldout=50, al_budgets=(50, 100, 200, 400), al_seeds=(0,), al_members=4,
                  search_problems=4, search_ns="1,2,4,8", search_tokens=256, search_beams="2x2",
                  search_beam_tokens=1024),
    "7b": Sizes(pool_problems=100, rounds=3, train_problems=16, batch_size=8, head_epochs=30, lora_epochs=1,
                al_problems=120, al_heldout=40, al_budgets=(50, 100, 200), al_seeds=(0,), al_members=4,
                search_problems=2, search_ns="1,2,4", search_tokens=256, search_beams="2x2",
                search_beam_tokens=1024),
}
STRATEGIES = ("random", "uncertainty")


@dataclass
class Run:
    """What every stage of one shape reads: folders, the device, the data and the tokenizer."""

    name: str
    shape: Shape
    sizes: Sizes
    work: Path  # this shape's folder
    data: Path | None  # a folder with gsm8k/{train,test}.jsonl, or None: synthetic problems
    tokenizer: object
    device: object  # torch.device
    dtype: object  # torch.dtype
    backbone: Path | None = None
    prm: Path | None = None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="1.5b,7b", help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument("--out", type=Path, default=Path("gpu-shapes"))
    parser.add_argument("--budget-seconds", type=float, default=540.0, help="the whole run's time (default 540)")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--work", type=Path, help="where the model folders go (default: a temporary folder)")
    parser.add_argument("--tokenizer", type=Path,
                        help="a tokenizer folder (default: the default model's SmolLM2 backbone if converted, "
                             "else bench.tiny's)")
    args = parser.parse_args(argv)
    names = [name.strip().lower() for name in args.shape.split(",") if name.strip()]
    unknown = [name for name in names if name not in SHAPES]
    if not names or unknown:
        parser.error(f"--shape: {', '.join(unknown) or 'nothing'} is not a shape; the shapes are {', '.join(SHAPES)}")
    if args.budget_seconds <= 0:
        parser.error("--budget-seconds: a positive number of seconds")
    setup_django()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-shapes-") as scratch:
        try:
            tokenizer = shape_tokenizer(args.tokenizer)
        except ValueError as error:
            parser.error(str(error))
        report = run_shapes(names, work=args.work or Path(scratch), out=args.out, data=args.data,
                            budget=args.budget_seconds, tokenizer_and_note=tokenizer)
    print(table(report))
    print(f"wrote {args.out / 'gpu-shapes.json'}")
    failed = [stage for shape in report["shapes"].values() for stage, got in shape["stages"].items() if "error" in got]
    return 1 if failed else 0


def setup_django() -> None:
    # A scratch run needs no real secret; the database is whatever DATABASE_URL says (SQLite by default).
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(32))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # a load report per stage would bury the table
    import django

    django.setup()


def run_shapes(names: list[str], *, work: Path, out: Path, data: Path, budget: float,
               tokenizer_and_note: tuple) -> dict:
    import torch

    from bench import simulation
    from scoring.core import prm

    started = time.perf_counter()
    device = prm.choose_device()
    tokenizer, tokenizer_note = tokenizer_and_note
    has_data = (data / "gsm8k" / "train.jsonl").exists() and (data / "gsm8k" / "test.jsonl").exists()
    report: dict = {
        "device": device_name(device), "torch": torch.__version__, "tokenizer": tokenizer_note,
        "vocab_size": len(tokenizer), "data": str(data / "gsm8k") if has_data else "synthetic word problems",
        "budget_seconds": budget, "memory": "torch.cuda.max_memory_allocated" if device.type == "cuda" else "peak RSS",
        "shapes": {},
    }
    with simulation.scratch_database():
        for index, name in enumerate(names):
            # An even share of what is left: time a small shape did not use goes to the next.
            share = (budget - (time.perf_counter() - started)) / (len(names) - index)
            run = Run(name, SHAPES[name], SIZES[name], work / name, data if has_data else None, tokenizer,
                      device, prm.choose_dtype(device))
            report["shapes"][name] = {"shape": asdict(run.shape), "sizes": asdict(run.sizes),
                                      "dtype": str(run.dtype).removeprefix("torch."), "stages": {}, "skipped": []}
            run_stages(run, report, deadline=time.perf_counter() + share, save=lambda: write_report(report, out))
    report["seconds"] = round(time.perf_counter() - started, 1)
    write_report(report, out)
    return report


def run_stages(run: Run, report: dict, *, deadline: float, save: Callable[[], None]) -> None:
    shape = report["shapes"][run.name]
    for stage_name, stage in STAGES:
        if time.perf_counter() >= deadline:
            shape["skipped"].append(stage_name)
            print(f"{run.name}: {stage_name} skipped: this shape's share of --budget-seconds is spent", flush=True)
            continue
        print(f"{run.name}: {stage_name} ...", flush=True)
        try:
            shape["stages"][stage_name] = measured(functools.partial(stage, run), run.device)
        except Exception as error:  # one stage's failure (out of memory, say) still leaves the others measured
            traceback.print_exc()
            shape["stages"][stage_name] = {"error": f"{type(error).__name__}: {error}"}
            if stage_name == "build":
                shape["skipped"] += [name for name, _ in STAGES[1:]]
                return
        finally:
            free_memory(run.device)
        save()


def measured(stage: Callable[[], dict], device) -> dict:
    """The stage's figures with its seconds and its peak memory in MiB."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    else:
        reset_peak_rss()
    started = time.perf_counter()
    figures = stage()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        from bench.commands.bench_export import peak_rss_mb

        peak = peak_rss_mb()
    return figures | {"seconds": round(time.perf_counter() - started, 2), "peak_memory_mib": round(peak, 1)}


def reset_peak_rss() -> None:
    """Start this process's VmHWM again from its current RSS (Linux: clear_refs 5), so that each
    stage's peak is its own; where that is refused the peak is the run's so far."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def free_memory(device) -> None:
    import torch

    from scoring.store import registry

    registry.forget_loaded()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# --- the stages ---------------------------------------------------------------------------------


def build_stage(run: Run) -> dict:
    """The random-weight backbone folder and a registered-ready head model over it."""
    import torch
    from transformers import AutoModelForCausalLM

    from scoring.core.prm import StepHead, save_head_model
    from scoring.store.default_model import backbone_separator

    torch.manual_seed(0)
    with torch.device(run.device):  # initialised where it runs: a 7B model never sits in host memory in fp32
        model = AutoModelForCausalLM.from_config(backbone_config(run.shape, run.tokenizer), dtype=run.dtype)
    parameters = sum(p.numel() for p in model.parameters())
    run.backbone = run.work / "backbone"
    model.save_pretrained(run.backbone)
    run.tokenizer.save_pretrained(run.backbone)
    del model
    run.prm = save_head_model(run.work / "prm", head=StepHead(run.shape.hidden, "point"), backbone=str(run.backbone),
                              separator=backbone_separator(run.backbone))
    weights = sum(f.stat().st_size for f in run.backbone.glob("*.safetensors"))
    return {"parameters": parameters, "weights_mib": round(weights / 2**20, 1)}


def backbone_config(shape: Shape, tokenizer):
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=shape.hidden, num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads, intermediate_size=shape.intermediate,
        max_position_embeddings=4096, tie_word_embeddings=shape.tie_embeddings,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
    )


def rescoring_stage(run: Run) -> dict:
    """bench_scoring's bare and end-to-end rates on a pool of real (or synthetic) solutions."""
    from bench import simulation_pool
    from bench.commands.bench_scoring import rescore_rates
    from scoring.store import registry

    pool, _ = simulation_pool.make_problems(pool="gsm8k" if run.data else "synthetic", data=run.data,
                                            n_pool=run.sizes.pool_problems, n_heldout=0)
    ids = simulation_pool.write_problems(pool, split="pool", source=f"gpu-shapes-{run.name}")
    assert run.prm is not None  # the build stage ran
    version = registry.register_model_version(name=f"gpu-shapes-{run.name}-{time.time_ns()}", path=run.prm)
    rates = rescore_rates(version, ids, rounds=run.sizes.rounds, per_prefix=False)
    return {key: rates[key] for key in ("solutions", "tokens", "bare_tokens_per_s", "e2e_tokens_per_s",
                                        "e2e_over_bare")}


def train_head_stage(run: Run) -> dict:
    """Head mode: features through a cold cache (the backbone's work), then the head's epochs."""
    from scoring.core import training

    backbone, rows = training_inputs(run, dtype=run.dtype)
    config = training.TrainConfig(mode="head", head="point", epochs=run.sizes.head_epochs, val_fraction=0.0,
                                  bias_correction="none")
    events, started, result = timed_training(rows, backbone, config, cache=training.FeatureCache(run.work / "cache"))
    epochs = [t for t, point in events if point is not None]
    steps_per_epoch = math.ceil(result.metrics["train_steps"] / config.batch_size)
    return {"solutions": len(result.train_examples), "feature_tokens": result.tokens,
            "feature_tokens_per_s": round(result.tokens / (epochs[0] - started), 1),
            "steps_per_s": round((len(epochs) - 1) * steps_per_epoch / (epochs[-1] - epochs[0]), 1)}


def train_lora_stage(run: Run) -> dict:
    """LoRA: forward and backward through the backbone (fp32 weights, bf16 autocast on CUDA).

    Steps/s is steady state, from the end of the first optimizer step to the end of the last
    (the first pays for setup); tokens/s is that times the tokens of an average step."""
    import torch

    from scoring.core import training

    backbone, rows = training_inputs(run, dtype=torch.float32)
    config = training.TrainConfig(mode="lora", head="point", epochs=run.sizes.lora_epochs,
                                  batch_size=run.sizes.batch_size, val_fraction=0.0, bias_correction="none")
    events, _, result = timed_training(rows, backbone, config, cache=None)
    steps = [t for t, point in events if point is None]
    steps_per_s = (len(steps) - 1) / (steps[-1] - steps[0])
    return {"solutions": len(result.train_examples), "steps": len(steps), "tokens": result.tokens,
            "steps_per_s": round(steps_per_s, 3), "tokens_per_s": round(steps_per_s * result.tokens / len(steps), 1),
            "whole_run_tokens_per_s": round(result.tokens_per_second, 1)}


def training_inputs(run: Run, *, dtype):
    """The backbone loaded for training and labeled rows: gpu_train_eval's GSM8K references with
    corrupted copies, or bench_training's synthetic rows without data."""
    from scoring.core import training
    from scoring.store.default_model import backbone_separator

    assert run.backbone is not None  # the build stage ran
    backbone = training.load_backbone(run.backbone, device=run.device, dtype=dtype,
                                      separator=backbone_separator(run.backbone))
    if run.data:
        from bench.gpu_train_eval import labeled_rows

        rows, _ = labeled_rows(run.data / "gsm8k" / "train.jsonl", problems=run.sizes.train_problems,
                               corruptions=2, seed=0)
    else:
        from bench.commands.bench_training import synthetic_rows

        rows = synthetic_rows(3 * run.sizes.train_problems)
    return backbone, rows


def timed_training(rows, backbone, config, *, cache):
    """training.train with a clock on its progress: (time, point) per call, the start, the result."""
    from scoring.core import training

    events: list[tuple[float, dict | None]] = []
    started = time.perf_counter()
    result = training.train(rows, backbone=backbone, config=config, cache=cache, backbone_id="gpu-shapes",
                            progress=lambda done, total, message, point: events.append((time.perf_counter(), point)))
    return events, started, result


def active_learning_stage(run: Run) -> dict:
    """A short `simulate_active_learning --scale` run on this backbone."""
    import torch

    import bench

    out = run.work / "active-learning.json"
    sizes = run.sizes
    command = ["--scale", "--output", str(out), "--plot", str(run.work / "active-learning.svg"),
               "--backbone", str(run.backbone), "--cache-dir", str(run.work / "al-cache"),
               "--problems", str(sizes.al_problems), "--heldout", str(sizes.al_heldout),
               "--budgets", *map(str, sizes.al_budgets), "--seeds", *map(str, sizes.al_seeds),
               "--members", str(sizes.al_members), "--strategies", *STRATEGIES]
    command += ["--pool", "gsm8k", "--data", str(run.data)] if run.data else ["--pool", "synthetic"]
    threads = torch.get_num_threads()
    try:
        bench.call("simulate_active_learning", *command, stdout=open(os.devnull, "w"))
    finally:
        torch.set_num_threads(threads)  # the command leaves the loop's one thread set
    result = json.loads(out.read_text())
    timing = result["timing"]
    last = {strategy: summary["paired_auc"]["mean"][-1] for strategy, summary in result["strategies"].items()}
    return {"pool_solutions": result["pool"]["solutions"], "featurized_tokens": timing["featurized_tokens"],
            "featurize_tokens_per_s": round(timing["featurized_tokens"] / timing["featurize_seconds"], 1),
            "loop_seconds": round(timing["loop_seconds"], 2),
            "rounds_per_s": round(len(sizes.al_seeds) * len(STRATEGIES) * (len(sizes.al_budgets) - 1)
                                  / timing["loop_seconds"], 2),
            "final_paired_auc": last}


def search_stage(run: Run) -> dict:
    """A short `eval_search` curve: the shape's PRM over a tiny random generator (best-of-N, beam)."""
    from django.core.management import call_command

    from bench.tiny import build_tiny_generator

    sizes = run.sizes
    generator = build_tiny_generator(run.work / "generator")
    data = run.data or generated_gsm8k(run.work / "generated-data", sizes.search_problems)
    top_n = max(int(n) for n in sizes.search_ns.split(","))
    out = run.work / "search-eval.json"
    call_command("eval_search", "--prm", str(run.prm), "--generator", str(generator), "--dataset", "gsm8k",
                 "--data", str(data), f"--problems={sizes.search_problems}", f"--ns={sizes.search_ns}",
                 f"--aca=1,1,{top_n}", "--aca-lams=", "--mcts=", f"--max-solution-tokens={sizes.search_tokens}",
                 f"--beams={sizes.search_beams}", f"--beam-tokens={sizes.search_beam_tokens}",
                 "--out", str(out), stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"))
    report = json.loads(out.read_text())
    records = report["records"]
    runs = [method_run for r in records for method_run in r["runs"]]
    generated = sum(c["tokens"] for r in records for c in r["candidates"]) + sum(m["tokens"] for m in runs)
    prm_calls = sum(len(r["candidates"]) for r in records) + sum(m["prm_calls"] for m in runs)
    seconds = max(report["seconds"], 0.1)  # the report rounds to tenths
    return {"problems": report["problems"], "generated_tokens": generated, "prm_calls": prm_calls,
            "generated_tokens_per_s": round(generated / seconds, 1), "prm_calls_per_s": round(prm_calls / seconds, 2),
            "curves": sorted(report["curves"])}


def generated_gsm8k(folder: Path, n: int) -> Path:
    """GSM8K-format test lines from the project's synthetic word problems, where --data has none."""
    from annotate.pool import synthetic

    lines = [json.dumps({"question": p.statement, "answer": "\n".join(p.correct.steps) + f"\n#### {p.answer}"})
             for p in synthetic.make_pool(n_problems=n, variants_per_problem=0, seed=0)]
    (folder / "gsm8k").mkdir(parents=True, exist_ok=True)
    (folder / "gsm8k" / "test.jsonl").write_text("\n".join(lines) + "\n")
    return folder


STAGES: tuple[tuple[str, Callable[[Run], dict]], ...] = (
    ("build", build_stage), ("rescoring", rescoring_stage), ("train_head", train_head_stage),
    ("train_lora", train_lora_stage), ("active_learning", active_learning_stage), ("search", search_stage),
)


# --- tokenizer, device, report -------------------------------------------------------------------


def shape_tokenizer(folder: Path | None):
    """(tokenizer, what it is): the one in `folder`; else SmolLM2's from the default model's
    converted backbone (it has the step marker) where that is at hand; else bench.tiny's
    byte-level BPE with the step marker. Nothing is converted or downloaded."""
    from django.conf import settings
    from transformers import AutoTokenizer

    from bench.tiny import build_tiny_tokenizer
    from scoring.store import default_model

    if folder is None:
        folder = settings.MODELS_DIR / default_model.BACKBONE_NAME
        if not (folder / "tokenizer_config.json").exists():
            return build_tiny_tokenizer(step_marker=True), "bench.tiny's byte-level BPE with the step marker"
    elif not (folder / "tokenizer_config.json").exists():
        raise ValueError(f"--tokenizer: {folder} holds no tokenizer (tokenizer_config.json)")
    return AutoTokenizer.from_pretrained(folder), f"{folder.name} ({folder})"


def device_name(device) -> str:
    import torch

    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return f"{device.type}: {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"


def write_report(report: dict, out: Path) -> None:
    (out / "gpu-shapes.json").write_text(json.dumps(report, indent=2) + "\n")


def table(report: dict) -> str:
    lines = [f"device {report['device']}; tokenizer {report['tokenizer']}; memory: {report['memory']}",
             f"{'shape':6} {'stage':16} {'seconds':>8} {'peak MiB':>10}  figures"]
    for name, shape in report["shapes"].items():
        for stage, got in shape["stages"].items():
            figures = ", ".join(f"{key} {value}" for key, value in got.items()
                                if key.endswith("_per_s") or key in ("e2e_over_bare", "parameters", "error"))
            lines.append(f"{name:6} {stage:16} {got.get('seconds', '-'):>8} {got.get('peak_memory_mib', '-'):>10}"
                         f"  {figures}")
        for stage in shape["skipped"]:
            lines.append(f"{name:6} {stage:16} {'skipped':>8}")
    lines.append(f"total {report.get('seconds', '-')} s of a {report['budget_seconds']:g} s budget")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
