"""One process of `bench_scoring --workers N --in-process`: chunks scored as an `ml` worker's pool
process scores them (scoring.rescoring.rescore.score_chunk), without Celery around them.

Reads one JSON line from stdin, {"version": ID, "chunks": [[solution ids], ...]}, loads the model,
prints "ready", waits for a line "go", scores the chunks and prints one JSON line:
{"solutions": scored, "cpu_s": this process's CPU seconds while scoring}.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def main() -> None:
    import django

    django.setup()
    from config.celery import allow_tokenizer_threads
    from scoring.models import ModelVersion
    from scoring.rescoring.rescore import score_chunk
    from scoring.store import registry

    allow_tokenizer_threads()  # as the worker's pool process does
    order = json.loads(sys.stdin.readline())
    version = ModelVersion.objects.get(pk=order["version"])
    registry.load(version)
    print("ready", flush=True)
    sys.stdin.readline()
    started = time.process_time()
    scored = sum(score_chunk(model_version=version, solution_ids=chunk)[0] for chunk in order["chunks"])
    print(json.dumps({"solutions": scored, "cpu_s": time.process_time() - started}), flush=True)


if __name__ == "__main__":
    main()
