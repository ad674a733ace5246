"""bench/gpu_shapes.py end to end with the tiny shape on the CPU: every stage measured, in a
scratch database of the configured server, within its budget."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "bench" / "gpu_shapes.py"
STAGES = ("build", "rescoring", "train_head", "train_lora", "active_learning", "search")
RATES = {  # per stage, the rates the run must report as positive numbers
    "rescoring": ("bare_tokens_per_s", "e2e_tokens_per_s"),
    "train_head": ("feature_tokens_per_s", "steps_per_s"),
    "train_lora": ("steps_per_s", "tokens_per_s"),
    "active_learning": ("featurize_tokens_per_s", "rounds_per_s"),
    "search": ("generated_tokens_per_s", "prm_calls_per_s"),
}


def run_script(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_tiny_shape_measures_every_stage_on_the_cpu(tmp_path):
    out = tmp_path / "out"
    done = run_script("--shape", "tiny", "--out", str(out), "--work", str(tmp_path / "work"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    report = json.loads((out / "gpu-shapes.json").read_text())
    tiny = report["shapes"]["tiny"]
    assert list(tiny["stages"]) == list(STAGES) and tiny["skipped"] == []
    for stage in STAGES:
        assert tiny["stages"][stage]["seconds"] > 0
        assert tiny["stages"][stage]["peak_memory_mib"] > 0
    for stage, keys in RATES.items():
        for key in keys:
            assert tiny["stages"][stage][key] > 0, (stage, key, tiny["stages"][stage])
    ratio = tiny["stages"]["rescoring"]["e2e_over_bare"]
    assert isinstance(ratio, float) and 0 < ratio <= 1.5
    assert tiny["stages"]["build"]["parameters"] > 0 and tiny["dtype"] == "float32"
    assert report["memory"] == "peak RSS" and report["vocab_size"] > 0 and report["tokenizer"]
    assert report["seconds"] <= report["budget_seconds"]
    # The table names every stage with its figures.
    for stage in STAGES:
        assert f"tiny   {stage}" in done.stdout


@pytest.mark.slow
def test_a_spent_budget_skips_the_stages_with_a_line_saying_so(tmp_path):
    out = tmp_path / "out"
    done = run_script("--shape", "tiny", "--out", str(out), "--budget-seconds", "0.001", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tiny = json.loads((out / "gpu-shapes.json").read_text())["shapes"]["tiny"]
    assert tiny["stages"] == {} and tiny["skipped"] == list(STAGES)
    assert "tiny: build skipped: this shape's share of --budget-seconds is spent" in done.stdout


def test_an_unknown_shape_is_refused_naming_the_option(tmp_path):
    done = run_script("--shape", "tiny,13b", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 2
    assert "--shape: 13b is not a shape" in done.stderr
