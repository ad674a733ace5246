"""Rescoring through a real Celery worker process, including one killed mid-job."""
import pytest

from annotate.models import Problem, Project, QueueItem, Solution, Step
from annotate.models.pool import content_hash
from bench.tiny import build_tiny_prm
from jobs.states import JobState
from scoring.models import RescoreJob, SolutionScore, StepScore
from scoring.rescoring import rescore as scoring
from scoring.store import registry
from scoring.tasks import resume_rescores_task
from tests.conftest import WorkerProcess, wait_for


def make_pool(n_solutions: int, steps: int = 8) -> None:
    """A pool written in bulk (factories would take longer than the test)."""
    problems = Problem.objects.bulk_create(
        Problem(statement=f"Compute {n} * 3.", ground_truth_answer=str(3 * n), content_hash=content_hash("p", n))
        for n in range(n_solutions // 2)
    )
    solutions = Solution.objects.bulk_create(
        Solution(problem=problems[n // 2], is_correct=n % 3 != 0, content_hash=content_hash("s", n))
        for n in range(n_solutions)
    )
    Step.objects.bulk_create(
        Step(solution=s, index=i, text=f"Step {i}: {i} * 3 = {3 * i}, carry on with solution {s.pk}.")
        for s in solutions for i in range(steps)
    )


@pytest.fixture
def tiny_current(transactional_db, tmp_path):
    folder = build_tiny_prm(tmp_path / "tiny", kind="head", head_type="beta")
    return registry.register_model_version(name="tiny", path=folder, make_current=True)


@pytest.fixture
def worker_factory(transactional_db, tmp_path, monkeypatch):
    """Start (and restart) real workers with small chunks; all are stopped at the end."""
    monkeypatch.setenv("STEPWISE_RESCORE_CHUNK_SIZE", "4")
    workers = []

    def start() -> WorkerProcess:
        worker = WorkerProcess(tmp_path / f"worker-{len(workers)}.log")
        workers.append(worker)
        worker.start()
        return worker

    yield start
    for worker in workers:
        worker.stop()


def job_state(job_id: int) -> str:
    return RescoreJob.objects.get(pk=job_id).state


@pytest.mark.embedded
def test_worker_rescores_the_pool_and_rebuilds_the_queue(tiny_current, worker_factory):
    make_pool(20)
    worker_factory()
    job = scoring.start_rescore(model_version=tiny_current, project=Project.objects.sole())
    wait_for(lambda: job_state(job.pk) in {JobState.SUCCEEDED, JobState.FAILED}, timeout=120)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.error
    assert (job.chunks_total, job.chunks_done, job.done, job.total) == (5, 5, 20, 20)
    assert SolutionScore.objects.filter(model_version=tiny_current).count() == 20
    assert StepScore.objects.filter(model_version=tiny_current).count() == 160
    assert QueueItem.objects.filter(generation=job.generation, model_version_name="tiny").count() == 20

    # Same model, unchanged pool: a second job has nothing to score and plans no chunk.
    again = scoring.start_rescore(model_version=tiny_current, project=Project.objects.sole(), rebuild_queue=False)
    wait_for(lambda: job_state(again.pk) == JobState.SUCCEEDED, timeout=60)
    assert RescoreJob.objects.get(pk=again.pk).chunks_total == 0


@pytest.mark.embedded
def test_killed_worker_mid_job_leaves_every_score_exactly_once(tiny_current, worker_factory):
    make_pool(120)
    worker = worker_factory()
    job = scoring.start_rescore(model_version=tiny_current, project=Project.objects.sole())
    wait_for(lambda: RescoreJob.objects.get(pk=job.pk).chunks_done >= 1, timeout=120, interval=0.05)
    worker.kill()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.chunks_done < job.chunks_total, "job ended before the kill"

    worker_factory()
    # Chunks still in the broker run on the new worker; the one lost with the dead worker is
    # re-dispatched by the resume task (the broker alone may never redeliver it).
    resume_rescores_task.delay()
    wait_for(lambda: job_state(job.pk) in {JobState.SUCCEEDED, JobState.FAILED}, timeout=180)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.error
    assert job.chunks_done == job.chunks_total == 30
    assert SolutionScore.objects.filter(model_version=tiny_current).count() == 120
    assert StepScore.objects.filter(model_version=tiny_current).count() == Step.objects.count() == 120 * 8
    assert QueueItem.objects.filter(generation=job.generation).exists()


@pytest.mark.django_db
def test_an_unexpected_scoring_failure_comes_back_as_a_503_answer_not_an_exception(tmp_path, monkeypatch):
    from scoring.tasks import score_texts_task

    version = registry.register_model_version(name="tiny", path=build_tiny_prm(tmp_path / "tiny"))

    def out_of_memory(**_):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(scoring, "score_texts", out_of_memory)
    answer = score_texts_task(version.pk, [["What is 1 + 1?", ["1 + 1 = 2."]]])
    assert answer == {"error": "scoring failed: RuntimeError: CUDA out of memory", "status": 503}
