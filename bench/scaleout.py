"""Rescoring throughput with 1, 2, ... `ml` workers (`bench_scoring --workers 1,2 [--remote]`).

Real worker processes on the configured broker and database rescore a committed pool of
8-step solutions with a fresh model version each time (so nothing is scored yet); the rate is
the job's own (solutions and tokens from the done chunks, over started -> finished, model
loading in each worker included), how busy the machine's cores were and how long each worker
waited between one chunk and the next. With --remote the version is a /pooling endpoint: one
`bench.pooling_server` process with the same tiny model, which all workers share.
Everything written (pool, versions, scores) is deleted at the end. Other ml workers on the
same broker would take chunks too: stop them first.
"""
from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from pathlib import Path

from django.conf import settings

from annotate.models import Problem, Solution, Step
from bench import tables
from jobs.states import JobState
from scoring.core.model_files import read_model_config
from scoring.models import ModelVersion, RescoreChunk, RescoreJob, SolutionScore, StepScore
from scoring.rescoring import rescore as scoring
from scoring.store import registry

REPO_ROOT = Path(settings.BASE_DIR)


@contextmanager
def worker_processes(count: int, *, chunk_size: int, logs: Path, threads: int = 1):
    """`count` celery workers on the ml queue, one process each with `threads` torch threads
    (0: torch's default, one per core), stopped on exit."""
    env = {**os.environ, "STEPWISE_RESCORE_CHUNK_SIZE": str(chunk_size), "PYTHONUNBUFFERED": "1"}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    started = []
    try:
        for index in range(count):
            log = logs / f"worker-{index}.log"
            command = [sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", "ml", "--concurrency", "1",
                       "-n", f"bench{index}-{os.getpid()}@%h", "--without-gossip", "--without-mingle",
                       "--without-heartbeat", "--loglevel", "INFO"]
            with log.open("wb") as out:
                started.append(subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=out,
                                                stderr=subprocess.STDOUT, start_new_session=True))
            wait_until(lambda log=log: b"ready." in log.read_bytes(), timeout=120, what=f"worker {index} ({log})")
        yield
    finally:
        for process in started:
            stop(process)


@contextmanager
def pooling_server(folder: Path, logs: Path):
    """A bench.pooling_server process for `folder`; yields its base URL."""
    command = [sys.executable, "-m", "bench.pooling_server", "--model", str(folder), "--port", "0"]
    with (logs / "pooling-server.log").open("wb") as err:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=err, text=True,
                                   start_new_session=True)
    try:
        line = process.stdout.readline()
        if " at " not in line:
            raise RuntimeError(f"pooling server did not start; see {logs / 'pooling-server.log'}")
        yield line.split(" at ", 1)[1].split("/pooling", 1)[0]
    finally:
        stop(process)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def wait_until(predicate: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not ready within {timeout:g} s")
        time.sleep(0.2)


def rescore_rate(version: ModelVersion, *, timeout: float) -> dict:
    """Rescore the pool with `version` on the running workers; the job's rates, and how busy
    the machine's cores were meanwhile (what limits adding a worker on one machine)."""
    job = scoring.start_rescore(model_version=version, rebuild_queue=False)
    before = machine_cpu()
    wait_until(lambda: RescoreJob.objects.get(pk=job.pk).is_finished, timeout=timeout, what=f"rescore job {job.pk}")
    busy, total = (after - start for after, start in zip(machine_cpu(), before))
    job.refresh_from_db()
    if job.state != JobState.SUCCEEDED:
        raise RuntimeError(f"rescore job {job.pk} {job.state}: {job.error}")
    seconds = max((job.finished_at - job.started_at).total_seconds(), 1e-3)
    return {"solutions": job.done, "seconds": round(seconds, 2), "solutions_per_s": round(job.done / seconds, 1),
            "tokens_per_s": round(job.tokens_done / seconds, 1), "cores_busy": round(busy / total, 2),
            **between_chunks(job)}


def between_chunks(job: RescoreJob) -> dict:
    """How long each worker waited between finishing one chunk and claiming its next, from the
    chunk rows: the median wait, and the share of the workers' time spent so (what Celery's
    hand-off and a chunk's own bookkeeping cost, which plain processes do not pay). A chunk's
    claim time is its `heartbeat_at`, so this holds for chunks shorter than a heartbeat
    (STEPWISE_JOB_HEARTBEAT_SECONDS): the benchmark's are."""
    by_worker: dict[str, list[tuple]] = {}
    for claimed, finished, worker in job.chunks.order_by("heartbeat_at").values_list(
            "heartbeat_at", "finished_at", "claimed_by"):
        by_worker.setdefault(worker, []).append((claimed, finished))
    waits = [(later[0] - earlier[1]).total_seconds()
             for chunks in by_worker.values() for earlier, later in zip(chunks, chunks[1:])]
    spans = sum((chunks[-1][1] - chunks[0][0]).total_seconds() for chunks in by_worker.values())
    if not waits or spans <= 0:
        return {}
    return {"wait_between_chunks_ms": round(statistics.median(waits) * 1000, 1),
            "waiting_between_chunks": round(sum(waits) / spans, 3)}


def in_process_rate(version: ModelVersion, pool_ids: list[int], *, processes: int, chunk_size: int,
                    threads: int = 1) -> dict:
    """The same rescore without Celery: `processes` plain processes (bench.score_chunks), each
    given every `processes`-th chunk, start together once each has loaded the model. What the
    cores allow the workers; the CPU each spent per solution, with its reads and writes."""
    chunks = [pool_ids[start : start + chunk_size] for start in range(0, len(pool_ids), chunk_size)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)} if threads else dict(os.environ)
    started = [subprocess.Popen([sys.executable, "-m", "bench.score_chunks"], cwd=REPO_ROOT, env=env, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
               for _ in range(processes)]
    try:
        for index, process in enumerate(started):
            process.stdin.write(json.dumps({"version": version.pk, "chunks": chunks[index::processes]}) + "\n")
            process.stdin.flush()
        for process in started:
            if process.stdout.readline().strip() != "ready":
                raise RuntimeError("a bench.score_chunks process did not load the model")
        before, clock = machine_cpu(), time.perf_counter()
        for process in started:
            process.stdin.write("go\n")
            process.stdin.flush()
        done = [json.loads(process.stdout.readline()) for process in started]
        seconds = time.perf_counter() - clock
        busy, total = (after - start for after, start in zip(machine_cpu(), before))
    finally:
        for process in started:
            stop(process)
    solutions = sum(part["solutions"] for part in done)
    return {"solutions": solutions, "seconds": round(seconds, 2), "solutions_per_s": round(solutions / seconds, 1),
            "cpu_ms_per_solution": [round(part["cpu_s"] * 1000 / max(1, part["solutions"]), 2) for part in done],
            "cores_busy": round(busy / total, 2)}


def machine_cpu() -> tuple[int, int]:
    """(busy, all) CPU ticks of the whole machine so far, from /proc/stat (man 5 proc)."""
    ticks = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return sum(ticks[:8]) - idle, sum(ticks[:8])


def measure(*, counts: list[int], pool_ids: list[int], remote: bool, chunk_size: int, threads: int = 1,
            in_process: bool = False, timeout: float = 1800,
            report: Callable[[str, dict], None] = lambda key, rate: None) -> dict:
    """{"local_1_workers": {...}, "remote_1_workers": {...}, ...}: each worker count started
    once, the pool rescored locally and (with `remote`) through the pooling server; with
    `in_process`, "in_process_1_processes"...: the pool scored by as many plain processes."""
    from bench.tiny import build_tiny_prm

    # What earlier runs deleted (pools, versions and their scores) is still in these tables.
    tables.vacuum(Problem, Solution, Step, SolutionScore, StepScore, RescoreChunk, RescoreJob)
    results: dict = {"scaleout_solutions": len(pool_ids), "scaleout_chunk_size": chunk_size,
                     "scaleout_torch_threads_per_worker": threads or "default"}
    with tempfile.TemporaryDirectory() as workdir, ExitStack() as stack:
        work = Path(workdir)
        # A one-token step marker (as Qwen2.5-Math-PRM's <extra_0>): what STEP pooling reads.
        folder = build_tiny_prm(work / "tiny", kind="head", step_marker=True)
        separator = read_model_config(folder)["separator"]
        url = stack.enter_context(pooling_server(folder, work)) if remote else None
        versions: list[ModelVersion] = []
        stack.callback(lambda: [version.delete() for version in versions])
        for count in counts:
            with worker_processes(count, chunk_size=chunk_size, logs=work, threads=threads):
                for mode in ("local", "remote") if remote else ("local",):
                    name = f"bench-scaleout-{mode}-{count}-{time.time_ns()}"
                    versions.append(
                        registry.register_remote_version(name=name, config={
                            "url": url, "served_model": folder.name, "separator": separator, "positive_index": 1})
                        if mode == "remote" else registry.register_model_version(name=name, path=folder)
                    )
                    key = f"{mode}_{count}_workers"
                    results[key] = rescore_rate(versions[-1], timeout=timeout)
                    report(key, results[key])
            if in_process:
                versions.append(registry.register_model_version(name=f"bench-scaleout-in-process-{count}-"
                                                                     f"{time.time_ns()}", path=folder))
                key = f"in_process_{count}_processes"
                results[key] = in_process_rate(versions[-1], pool_ids, processes=count, chunk_size=chunk_size,
                                               threads=threads)
                report(key, results[key])
        for mode in ("local", "remote") if remote else ("local",):
            _add_ratios(results, counts, mode, "workers", rate="tokens_per_s")
        if in_process:
            _add_ratios(results, counts, "in_process", "processes", rate="solutions_per_s")
    return results


def _add_ratios(results: dict, counts: list[int], prefix: str, unit: str, *, rate: str) -> None:
    """"{prefix}_{N}_over_{first}_{unit}": each later count's `rate` over the first count's."""
    first = results[f"{prefix}_{counts[0]}_{unit}"][rate]
    for count in counts[1:]:
        later = results[f"{prefix}_{count}_{unit}"][rate]
        results[f"{prefix}_{count}_over_{counts[0]}_{unit}"] = round(later / first, 2)


@contextmanager
def stopped_by_sigterm():
    """Turn SIGTERM (a `timeout`, a Ctrl-C'd parent) into SystemExit, so the workers and the
    server this benchmark started are stopped and its rows deleted."""
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def delete_pool(solution_ids: list[int], *, batch: int = 2000) -> None:
    """Delete the pool's problems (their solutions, steps and scores with them) a batch at a
    time: one delete of a 50,000-solution pool names more steps than a statement may bind."""
    for start in range(0, len(solution_ids), batch):
        Problem.objects.filter(solutions__pk__in=solution_ids[start : start + batch]).delete()
