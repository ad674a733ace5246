"""A real Celery worker process consumes from the configured broker."""
import json
import os

import pytest

from annotate.models import ImportJob, Solution
from annotate.tasks import import_pool_task, ping_task
from jobs.states import JobState


@pytest.mark.embedded
def test_real_worker_process_executes_a_task(celery_worker_process):
    result = ping_task.delay("hello")
    assert result.get(timeout=60) == "hello"


@pytest.mark.embedded
def test_real_worker_runs_an_import_once_and_ignores_its_redelivery(celery_worker_process, tmp_path):
    path = tmp_path / "pool.jsonl"
    lines = [{"problem": f"What is {n} + 1?", "ground_truth_answer": str(n + 1),
              "steps": [f"{n} + 1 = {n + 1}.", f"# Answer\n\n{n + 1}"]} for n in range(5)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    job = ImportJob.objects.create(path=str(path), report_path=str(tmp_path / "report.jsonl"))
    assert import_pool_task.delay(job.pk).get(timeout=90) == 5
    job.refresh_from_db()
    finished = (job.state, job.created, job.finished_at)
    assert finished[:2] == (JobState.SUCCEEDED, 5)

    with open(path, "a") as handle:  # what a second run would import
        handle.write(json.dumps({"problem": "What is 9 + 9?", "ground_truth_answer": "18", "steps": ["18"]}) + "\n")
    import_pool_task.delay(job.pk).get(timeout=90)  # the same message again, as a redelivery brings it
    job.refresh_from_db()
    assert (job.state, job.created, job.finished_at) == finished
    assert Solution.objects.count() == 5


@pytest.mark.embedded
def test_rescore_button_score_and_search_api_leave_the_web_process_without_torch(celery_worker_process, admin_user,
                                                                                 tmp_path):
    """The worker does the ML: a web process serving these requests never imports torch."""
    import json
    import subprocess
    import sys

    from bench.tiny import build_tiny_prm
    from jobs.states import JobState
    from scoring.models import RescoreJob
    from scoring.store import registry
    from tests.conftest import REPO_ROOT, wait_for, worker_environment
    from tests.factories import SolutionFactory

    SolutionFactory.create_batch(3)
    version = registry.register_model_version(name="tiny", path=build_tiny_prm(tmp_path / "tiny"), make_current=True)
    web = subprocess.run(
        [sys.executable, "-m", "tests.web_process", str(admin_user.pk), str(version.pk)],
        cwd=REPO_ROOT, env={**worker_environment(), "ALLOWED_HOSTS": "testserver"},
        capture_output=True, text=True, timeout=180,
    )
    assert web.returncode == 0, web.stderr[-3000:]
    answer = json.loads(web.stdout.strip().splitlines()[-1])
    job = RescoreJob.objects.get()
    assert answer["rescore"] == [302, f"/models/jobs/rescore/{job.pk}/"]
    status, body = answer["score"]
    assert status == 200 and body["model"] == "tiny" and len(body["steps"]) == 2, body
    status, body = answer["search"]
    assert status == 200 and body["solution"]["steps"] and body["compute"]["generated_tokens"] <= 12, body
    assert (answer["torch_loaded"], answer["transformers_loaded"]) == (False, False)
    wait_for(lambda: RescoreJob.objects.get(pk=job.pk).is_finished, timeout=120)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.error


def test_a_pool_process_tokenizes_on_as_many_threads_as_torch_computes_on(monkeypatch):
    from config.celery import allow_tokenizer_threads

    for name in ("TOKENIZERS_PARALLELISM", "RAYON_NUM_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")  # as the main process sets it before forking
    allow_tokenizer_threads()
    assert os.environ["TOKENIZERS_PARALLELISM"] == "true" and "RAYON_NUM_THREADS" not in os.environ

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a worker sharing the machine with others
    allow_tokenizer_threads()
    assert os.environ["RAYON_NUM_THREADS"] == "1"
