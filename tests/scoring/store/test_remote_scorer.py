"""A model version served at a /pooling endpoint: a real `bench.pooling_server` process
(vLLM's protocol, backed by a tiny PRM) scores like the local model, through real workers."""
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.core.management import call_command

from annotate.models import Project, Solution, Step
from bench.pooling_server import PoolingModel, make_server
from bench.tiny import build_tiny_prm
from jobs.states import JobState
from scoring.core.prm import read_model_config, write_model_config
from scoring.models import RescoreChunk, RescoreJob, SolutionScore, StepScore
from scoring.rescoring import rescore as scoring
from scoring.rescoring import scores
from scoring.store import registry
from scoring.store.remote_scorer import RemoteConfig, RemotePRM, RemoteScoringError
from scoring.tasks import rescore_chunk_task
from tests.conftest import REPO_ROOT, wait_for, worker_environment
from tests.scoring.test_tasks import make_pool, worker_factory  # noqa: F401  (a fixture)

# A special token as the step tag, as Qwen2.5-Math-PRM's <extra_0>: the tokenizer never merges
# it with its neighbours, so the server (whole text) and local scoring (piece by piece) read
# the same tokens.
STEP_TAG = "</s>"
ITEMS = [
    ("Compute 4 * 3.", ["Step 0: 0 * 3 = 0, carry on.", "Step 1: 4 * 3 = 12.", "# Answer\n\n12"]),
    ("What is 12 + 7?", ["Add the ones: 2 + 7 = 9.", "Then the tens: 19."]),
    ("Let x be the number; 3x = 12.", ["So x = 4."]),
]


class PoolingServer:
    """`python -m bench.pooling_server` in a child process; its first line says where it listens."""

    def __init__(self, folder: Path, log: Path, *extra: str):
        command = [sys.executable, "-m", "bench.pooling_server", "--model", str(folder), "--port", "0",
                   "--device", "cpu", "--dtype", "float32", *extra]
        self.log = open(log, "wb")
        self.process = subprocess.Popen(command, cwd=REPO_ROOT, env=worker_environment(), text=True,
                                        stdout=subprocess.PIPE, stderr=self.log)
        line = self.process.stdout.readline()
        if " at " not in line:
            raise RuntimeError(f"pooling server did not start: {line!r}\n{log.read_text()[-2000:]}")
        self.url = line.split(" at ", 1)[1].split("/pooling", 1)[0]
        self.positive_index = int(line.rsplit("positive_index=", 1)[1])

    def stats(self) -> dict:
        import json
        import urllib.request

        with urllib.request.urlopen(f"{self.url}/stats", timeout=10) as answer:
            return json.loads(answer.read())

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=20)
        self.log.close()


def tagged_tiny(folder: Path, kind: str) -> Path:
    """A tiny PRM of this kind whose separator is the step tag."""
    build_tiny_prm(folder, kind=kind, head_type="beta" if kind == "head" else "point")
    config = read_model_config(folder)
    write_model_config(folder, {**config, "separator": STEP_TAG})
    return folder


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    return tagged_tiny(tmp_path_factory.mktemp("remote") / "tiny", "head")


@pytest.fixture(scope="module")
def server(tiny_folder, tmp_path_factory):
    """One server for the module, failing every 3rd scoring request: every client here retries."""
    server = PoolingServer(tiny_folder, tmp_path_factory.mktemp("server") / "server.log", "--fail-every", "3")
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def float32_scoring(settings):
    settings.STEPWISE_SCORING_DTYPE = "float32"  # as the server computes, so scores compare to 1e-5


def remote_config(server: PoolingServer, folder: Path, **overrides) -> dict:
    return {"url": server.url, "served_model": folder.name, "separator": STEP_TAG,
            "positive_index": server.positive_index, "backoff": 0.02, **overrides}


@pytest.mark.django_db
def test_remote_scores_equal_the_local_scores_of_the_same_model_despite_failed_calls(server, tiny_folder):
    local = registry.register_model_version(name="local", path=tiny_folder)
    remote = registry.register_remote_version(name="remote", config=remote_config(server, tiny_folder, batch_size=1))
    before = server.stats()

    expected = scoring.score_texts(items=ITEMS, model_version=local)
    got = scoring.score_texts(items=ITEMS, model_version=remote)
    assert [len(steps) for steps in got] == [3, 2, 1]
    for local_steps, remote_steps in zip(expected, got):
        for a, b in zip(local_steps, remote_steps):
            assert abs(a["p"] - b["p"]) < 1e-5
    after = server.stats()
    assert after["failed"] > before["failed"]  # 3 requests and their retries: at least one 503
    assert after["inputs_scored"] - before["inputs_scored"] == len(ITEMS)


@pytest.mark.django_db
def test_endpoint_answers_off_the_protocol_are_clear_errors_and_4xx_is_not_retried(server, tiny_folder):
    wrong_name = RemotePRM(RemoteConfig.from_dict(remote_config(server, tiny_folder, served_model="other")))
    with pytest.raises(RemoteScoringError, match="HTTP 404: The model `other` does not exist"):
        wrong_name.step_probabilities(ITEMS[:1])
    assert wrong_name.requests_sent == 1

    tag_in_step = RemotePRM(RemoteConfig.from_dict(remote_config(server, tiny_folder)))
    with pytest.raises(RemoteScoringError, match="item 0 has 1 steps but the server returned 2 step outputs"):
        tag_in_step.step_probabilities([("Compute.", [f"a step that quotes {STEP_TAG} itself"])])

    with pytest.raises(ValueError, match="'url': .*only http:// and https://"):
        registry.register_remote_version(name="bad", config={**remote_config(server, tiny_folder), "url": "gpu:80"})


@pytest.mark.django_db
def test_register_remote_model_checks_the_endpoint_then_records_a_current_version(server, tiny_folder):
    before = server.stats()["inputs_scored"]
    call_command("register_remote_model", "served-tiny", server.url, "--served-model", tiny_folder.name,
                 "--separator", STEP_TAG, "--positive-index", "1", "--check", "--make-current")
    version = registry.current_model(Project.objects.sole())
    assert (version.name, version.kind, version.path) == ("served-tiny", "remote", f"{server.url}/pooling")
    assert version.config["separator"] == STEP_TAG
    assert server.stats()["inputs_scored"] == before + 1  # the --check


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.django_db
def test_a_rescore_at_an_unreachable_endpoint_fails_the_job_naming_the_endpoint():
    make_pool(4, steps=2)
    url = f"http://127.0.0.1:{free_port()}"
    version = registry.register_remote_version(
        name="nowhere", config={"url": url, "served_model": "m", "separator": STEP_TAG, "retries": 1, "backoff": 0.01}
    )
    job = RescoreJob.objects.create(model_version=version)
    [chunk] = scoring.plan_chunks(job=job, chunk_size=10)
    with pytest.raises(RemoteScoringError):
        scoring.run_chunk(chunk_id=chunk.pk)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert job.error.startswith(f"chunk 0: RemoteScoringError: POST {url}/pooling: cannot connect")
    assert job.error.endswith("(after 2 attempts)")
    assert not SolutionScore.objects.exists()


def scores_by_step(version) -> dict[int, float]:
    return dict(StepScore.objects.filter(model_version=version).values_list("step_id", "p"))


@pytest.mark.embedded
def test_two_workers_rescore_one_pool_through_a_failing_server_scoring_each_solution_once(
    server, tiny_folder, worker_factory  # noqa: F811
):
    make_pool(32, steps=3)
    remote = registry.register_remote_version(
        name="remote", config=remote_config(server, tiny_folder, batch_size=2, concurrency=2, retries=6)
    )
    worker_factory(), worker_factory()
    before = server.stats()
    job = scoring.start_rescore(model_version=remote, project=Project.objects.sole(), rebuild_queue=False)
    wait_for(lambda: RescoreChunk.objects.filter(job=job).count() == 8, timeout=60, interval=0.05)
    for chunk in RescoreChunk.objects.filter(job=job):  # every chunk handed out a second time
        rescore_chunk_task.delay(job.pk, chunk.pk)
    wait_for(lambda: RescoreJob.objects.get(pk=job.pk).is_finished, timeout=120)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.error
    assert (job.chunks_done, job.done) == (8, 32) and job.tokens_done > 0
    after = server.stats()
    assert after["failed"] > before["failed"]  # calls failed and were retried...
    assert after["inputs_scored"] - before["inputs_scored"] == 32  # ...and no solution was scored twice
    holders = set(RescoreChunk.objects.filter(job=job).values_list("claimed_by", flat=True))
    assert len(holders) == 2, holders  # both workers took chunks

    local = registry.register_model_version(name="local", path=tiny_folder)
    scores.score_solutions(model_version=local, solution_ids=list(Solution.objects.values_list("pk", flat=True)))
    remote_p, local_p = scores_by_step(remote), scores_by_step(local)
    assert set(remote_p) == set(Step.objects.values_list("pk", flat=True))
    assert max(abs(remote_p[step] - local_p[step]) for step in remote_p) < 1e-5


@pytest.mark.django_db(transaction=True)
def test_scoring_through_a_remote_version_never_imports_torch(server, tiny_folder):
    make_pool(4, steps=2)
    version = registry.register_remote_version(name="remote", config=remote_config(server, tiny_folder))
    ids = list(Solution.objects.values_list("pk", flat=True))
    script = (
        "import sys, django; django.setup()\n"
        "from scoring.rescoring import scores\nfrom scoring.models import ModelVersion\n"
        f"version = ModelVersion.objects.get(pk={version.pk})\n"
        f"scored = scores.score_solutions(model_version=version, solution_ids={ids})\n"
        "print(scored, 'torch' in sys.modules)\n"
    )
    env = {**worker_environment(), "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split() == ["4", "False"], done.stderr[-2000:]
    assert SolutionScore.objects.filter(model_version=version).count() == 4


def test_a_server_with_an_api_key_refuses_a_client_without_it_and_the_client_reads_it_from_the_environment(
    tiny_folder, monkeypatch
):
    httpd = make_server(PoolingModel(tiny_folder, served_name="tiny", device="cpu"), api_key="s3cret")
    httpd.start()
    try:
        config = {"url": httpd.url, "served_model": "tiny", "separator": STEP_TAG, "api_key_env": "TINY_PRM_KEY"}
        client = RemotePRM(RemoteConfig.from_dict(config))
        monkeypatch.delenv("TINY_PRM_KEY", raising=False)
        with pytest.raises(RemoteScoringError, match="TINY_PRM_KEY is not set"):
            client.step_probabilities(ITEMS[:1])
        monkeypatch.setenv("TINY_PRM_KEY", "wrong")
        with pytest.raises(RemoteScoringError, match="HTTP 401: invalid or missing API key"):
            client.step_probabilities(ITEMS[:1])
        assert client.requests_sent == 1  # a refusal is not retried
        monkeypatch.setenv("TINY_PRM_KEY", "s3cret")
        assert len(client.step_probabilities(ITEMS[:1])[0]) == 3
    finally:
        httpd.shutdown()
        httpd.server_close()


class HostileHandler(BaseHTTPRequestHandler):
    """A /pooling server gone wrong, as its server's `mode` says: it dribbles its answer (or its
    headers) a byte at a time, or sends far more than any answer could be. Bounded in count and
    time, so a client that waits it out still ends."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        try:
            getattr(self, self.server.mode)()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client hung up: what a bounded client does

    def dribble_answer(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "100000")
        self.end_headers()
        for _ in range(300):
            self.wfile.write(b" ")  # JSON's whitespace: the answer is never over
            time.sleep(0.1)

    def dribble_headers(self) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 300:
            self.wfile.write(bytes([byte]))
            time.sleep(0.1)

    def huge_declared(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(10**10))
        self.end_headers()
        self.wfile.write(b" " * 1024)

    def huge_stream(self) -> None:
        self.send_response(200)  # no length: the answer runs until the connection closes
        self.send_header("Connection", "close")
        self.end_headers()
        for _ in range(1024):  # 64 MiB at most
            self.wfile.write(b" " * 65536)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def hostile():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), HostileHandler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def hostile_client(httpd, mode: str, **config) -> RemotePRM:
    httpd.mode = mode
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    return RemotePRM(RemoteConfig.from_dict({"url": url, "served_model": "m", "separator": STEP_TAG, **config}))


@pytest.mark.parametrize("mode", ["dribble_answer", "dribble_headers"])
def test_a_server_that_dribbles_its_answer_is_cut_off_at_the_timeout(hostile, mode):
    client = hostile_client(hostile, mode, timeout=1.0, retries=1, backoff=0.01)
    started = time.monotonic()
    with pytest.raises(RemoteScoringError, match=r"timed out \(after 2 attempts\)"):
        client.step_probabilities(ITEMS[:1])
    # A byte every 0.1 s never lets the per-read timeout fire; the deadline ends each attempt.
    assert time.monotonic() - started < 4.0
    assert client.requests_sent == 2


@pytest.mark.parametrize("mode", ["huge_declared", "huge_stream"])
def test_an_answer_larger_than_max_answer_bytes_is_refused_naming_it(hostile, mode):
    client = hostile_client(hostile, mode, max_answer_bytes=2**20, timeout=30.0)
    started = time.monotonic()
    with pytest.raises(RemoteScoringError, match=r"larger than max_answer_bytes \(1,048,576 bytes\)"):
        client.step_probabilities(ITEMS[:1])
    assert time.monotonic() - started < 10.0
    assert client.requests_sent == 1  # not retried: the same server would send the same
    with pytest.raises(ValueError, match="'max_answer_bytes' must be an integer >= 1"):
        hostile_client(hostile, mode, max_answer_bytes=0)
