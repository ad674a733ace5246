"""What the scale-out benchmark reads from a rescore job's chunk rows (bench/scaleout.py)."""
from datetime import timedelta

from django.utils import timezone

from bench.scaleout import between_chunks
from scoring.models import ModelVersion, RescoreChunk, RescoreJob


def _job_with_chunks(runs: dict[str, list[tuple[float, float]]]) -> RescoreJob:
    """A job whose chunks each worker claimed and finished at these seconds after a start."""
    version = ModelVersion.objects.create(name="v", path="x", weights_sha256="0" * 64)
    job = RescoreJob.objects.create(model_version=version, rebuild_queue=False)
    start = timezone.now()
    index = 0
    for worker, chunks in runs.items():
        for claimed, finished in chunks:
            RescoreChunk.objects.create(job=job, index=index, state=RescoreChunk.State.DONE, claimed_by=worker,
                                        heartbeat_at=start + timedelta(seconds=claimed),
                                        finished_at=start + timedelta(seconds=finished))
            index += 1
    return job


def test_the_wait_between_chunks_is_each_workers_own(db):
    # Worker a waits 0.01 s, then 0.03 s; worker b, running at the same time, 0.02 s.
    job = _job_with_chunks({"host:1": [(0.0, 1.0), (1.01, 2.0), (2.03, 3.0)],
                            "host:2": [(0.5, 1.5), (1.52, 2.52)]})
    waited = between_chunks(job)
    assert waited["wait_between_chunks_ms"] == 20.0
    assert waited["waiting_between_chunks"] == round(0.06 / (3.0 + 2.02), 3)


def test_a_worker_with_one_chunk_waited_for_none(db):
    assert between_chunks(_job_with_chunks({"host:1": [(0.0, 1.0)]})) == {}
