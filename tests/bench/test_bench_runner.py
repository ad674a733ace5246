"""`./stepwise bench NAME` runs the benchmarks, which live apart from the product in bench/."""
import subprocess
import sys

import pytest

import bench
from tests.conftest import REPO_ROOT


def test_every_benchmark_is_a_command_the_runner_names():
    names = bench.names()
    assert {"bench_http", "bench_scoring", "simulate_active_learning"} <= set(names)
    for name in names:
        assert callable(bench.command(name).handle), name


def test_an_unknown_benchmark_is_refused_with_the_list_of_known_ones():
    with pytest.raises(KeyError, match="bench_http"):
        bench.command("bench_nothing")
    done = subprocess.run([sys.executable, "-m", "bench", "bench_nothing"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "no benchmark 'bench_nothing'" in done.stderr and "bench_http" in done.stderr


def test_the_runner_passes_arguments_to_the_benchmark():
    done = subprocess.run([sys.executable, "-m", "bench", "bench_splitting", "--help"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage: stepwise bench bench_splitting" in done.stdout and "--modes" in done.stdout
