"""Rescoring the pool: stored scores, aggregations, incremental and idempotent writes."""
import os

import pytest
import torch

from annotate.labeling import queueing
from annotate.models import Project, QueueItem, Step
from bench.tiny import build_tiny_prm
from jobs.states import JobState
from scoring.core.prm import aggregate
from scoring.learning import promotion
from scoring.models import ModelVersion, RescoreChunk, RescoreJob, SolutionScore, StepScore
from scoring.rescoring import rescore as scoring
from scoring.rescoring import scores
from scoring.store import registry
from tests.factories import SolutionFactory
from tests.scoring.projects import solution_in, two_projects


@pytest.fixture
def tiny_version(db, tmp_path, settings):
    settings.STEPWISE_SCORING_DTYPE = "float32"
    registry.forget_loaded()
    folder = build_tiny_prm(tmp_path / "tiny", kind="head", head_type="beta")
    yield registry.register_model_version(name="tiny-beta", path=folder, make_current=True)
    registry.forget_loaded()


@pytest.fixture
def pool(db):
    return [
        SolutionFactory(
            steps=[f"Step {i} of solution {n}: x = {i * n}." for i in range(1 + n % 4)], is_correct=n % 2 == 0
        )
        for n in range(6)
    ]


def test_every_step_and_solution_gets_one_score(tiny_version, pool):
    scored = scores.score_solutions(model_version=tiny_version, solution_ids=[s.pk for s in pool])
    assert scored == len(pool)
    assert StepScore.objects.filter(model_version=tiny_version).count() == Step.objects.count()
    assert SolutionScore.objects.filter(model_version=tiny_version).count() == len(pool)
    assert not StepScore.objects.filter(model_version=tiny_version, sigma__isnull=True).exists()


def test_solution_scores_aggregate_their_step_scores(tiny_version, pool):
    scores.score_solutions(model_version=tiny_version, solution_ids=[s.pk for s in pool])
    for solution in pool:
        steps = StepScore.objects.filter(step__solution=solution, model_version=tiny_version).order_by("step__index")
        ps = [s.p for s in steps]
        stored = SolutionScore.objects.get(solution=solution, model_version=tiny_version)
        assert stored.product == pytest.approx(torch.tensor(ps, dtype=torch.float64).prod().item())
        assert stored.min == min(ps) and stored.last == ps[-1]
        assert stored.mean == pytest.approx(sum(ps) / len(ps))
        assert stored.sigma == pytest.approx(sum(s.sigma for s in steps) / len(ps))


def test_stored_scores_match_the_model_on_the_same_texts(tiny_version, pool):
    scores.score_solutions(model_version=tiny_version, solution_ids=[pool[3].pk])
    items = [(pool[3].problem.statement, [s.text for s in pool[3].steps.order_by("index")])]
    direct = scoring.score_texts(items=items, model_version=tiny_version)[0]
    stored = StepScore.objects.filter(step__solution=pool[3], model_version=tiny_version).order_by("step__index")
    assert [s.p for s in stored] == pytest.approx([d["p"] for d in direct], abs=1e-6)
    assert set(direct[0]) == {"p", "mean", "sigma", "spread"}


def test_unchanged_pool_with_same_model_costs_zero_forward_passes(tiny_version, pool):
    ids = [s.pk for s in pool]
    scores.score_solutions(model_version=tiny_version, solution_ids=ids)
    model = registry.load(tiny_version)
    passes = model.forward_passes
    assert scores.score_solutions(model_version=tiny_version, solution_ids=ids) == 0
    assert model.forward_passes == passes
    # A new solution is the only thing scored next time.
    new = SolutionFactory(steps=["Only new work."])
    assert scores.score_solutions(model_version=tiny_version, solution_ids=[*ids, new.pk]) == 1
    assert model.forward_passes == passes + 1


def test_rerunning_a_chunk_writes_nothing_twice(tiny_version, pool):
    job = RescoreJob.objects.create(model_version=tiny_version, rebuild_queue=False)
    chunks = scoring.plan_chunks(job=job, chunk_size=4)
    assert [len(c.solution_ids) for c in chunks] == [4, 2]
    scoring.run_chunk(chunk_id=chunks[0].pk)
    counts = StepScore.objects.count(), SolutionScore.objects.count()
    # As if the task were redelivered after its worker died before acknowledging it.
    RescoreChunk.objects.filter(pk=chunks[0].pk).update(state=RescoreChunk.State.PENDING)
    assert scoring.run_chunk(chunk_id=chunks[0].pk) == 0
    assert (StepScore.objects.count(), SolutionScore.objects.count()) == counts
    job.refresh_from_db()
    assert (job.chunks_done, job.done, job.state) == (1, 4, JobState.RUNNING)


def test_writing_the_same_results_twice_keeps_one_row_each(tiny_version, pool):
    ids, step_ids, items = scores.read_items([s.pk for s in pool])
    results = registry.load(tiny_version).step_probabilities(items)
    for _ in range(2):
        scores.write_scores(model_version=tiny_version, solution_ids=ids, step_ids=step_ids, results=results)
    assert StepScore.objects.count() == Step.objects.count()
    assert SolutionScore.objects.count() == len(pool)


def test_last_chunk_finishes_the_job_and_rebuilds_the_queue_once(tiny_version, pool):
    job = RescoreJob.objects.create(model_version=tiny_version)
    for chunk in scoring.plan_chunks(job=job, chunk_size=4):
        scoring.run_chunk(chunk_id=chunk.pk)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.percent == 100 and job.generation == 0
    assert scoring.finish(job=job) is False  # a late duplicate cannot start a second generation


def test_a_job_counts_the_solutions_and_tokens_of_its_done_chunks(tiny_version, pool):
    job = RescoreJob.objects.create(model_version=tiny_version, rebuild_queue=False)
    first, second, *_ = scoring.plan_chunks(job=job, chunk_size=4)
    scoring.run_chunk(chunk_id=first.pk)
    RescoreChunk.objects.filter(pk=second.pk).update(tokens=10**6)  # not done: not counted
    scoring.refresh_progress(job=job)
    job.refresh_from_db()
    read = registry.load(tiny_version).score_counting_tokens(scores.read_items(first.solution_ids)[2])[1]
    assert (job.chunks_done, job.done, job.tokens_done) == (1, 4, read) and job.state == JobState.RUNNING


def test_a_job_with_nothing_to_score_finishes_at_once(tiny_version):
    job = RescoreJob.objects.create(model_version=tiny_version, rebuild_queue=False)
    assert scoring.plan_chunks(job=job) == []
    scoring.refresh_progress(job=RescoreJob.objects.get(pk=job.pk))
    assert RescoreJob.objects.get(pk=job.pk).state == JobState.SUCCEEDED


def test_a_model_whose_files_changed_is_refused(tiny_version):
    from scoring.core.prm import StepHead

    StepHead(32, "beta").save(tiny_version.path)
    with pytest.raises(registry.ModelIntegrityError, match="changed"):
        registry.load(tiny_version)


def test_score_texts_rejects_empty_steps_naming_the_item(tiny_version):
    with pytest.raises(ValueError, match="item 1: 'steps'"):
        scoring.score_texts(items=[("p", ["a"]), ("q", [])], model_version=tiny_version)


def test_register_refuses_remote_code_unless_allowed(db, tmp_path, settings):
    settings.STEPWISE_ALLOW_TRUST_REMOTE_CODE = False
    folder = build_tiny_prm(tmp_path / "m")
    with pytest.raises(ValueError, match="STEPWISE_ALLOW_TRUST_REMOTE_CODE"):
        registry.register_model_version(name="x", path=folder, trust_remote_code=True)
    assert not ModelVersion.objects.exists()


def test_aggregate_refuses_a_solution_without_steps():
    with pytest.raises(ValueError):
        aggregate([])


def test_only_jobs_idle_long_enough_count_as_stalled(tiny_version, pool):
    from datetime import timedelta

    from django.utils import timezone

    job = RescoreJob.objects.create(model_version=tiny_version, rebuild_queue=False)
    first, _ = scoring.plan_chunks(job=job, chunk_size=4)
    scoring.run_chunk(chunk_id=first.pk)
    assert scoring.stalled_jobs(idle_seconds=0) == [job]
    RescoreJob.objects.filter(pk=job.pk).update(created_at=timezone.now() - timedelta(hours=1))
    assert scoring.stalled_jobs(idle_seconds=600) == []  # a chunk finished just now
    RescoreChunk.objects.filter(pk=first.pk).update(finished_at=timezone.now() - timedelta(minutes=20))
    assert scoring.stalled_jobs(idle_seconds=600) == [job]


def test_a_failing_queue_rebuild_ends_the_job_failed_with_its_message(tiny_version, pool, monkeypatch):
    from scoring.rescoring import selection

    def broken_rebuild(**kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(selection, "rebuild_queue", broken_rebuild)
    job = RescoreJob.objects.create(model_version=tiny_version)
    (chunk,) = scoring.plan_chunks(job=job, chunk_size=10)
    with pytest.raises(RuntimeError):
        scoring.run_chunk(chunk_id=chunk.pk)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and "disk full" in job.error and job.finished_at is not None


def test_a_job_that_cannot_load_its_model_ends_failed_with_the_reason(tiny_version, pool):
    from scoring.core.prm import StepHead

    registry.forget_loaded()
    StepHead(32, "beta").save(tiny_version.path)  # the files no longer match the registered hash
    # The web side only records the job:
    job = scoring.start_rescore(model_version=tiny_version, project=Project.objects.sole())
    (chunk, *_) = scoring.plan_chunks(job=job, chunk_size=4)
    with pytest.raises(registry.ModelIntegrityError):
        scoring.run_chunk(chunk_id=chunk.pk)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and "changed" in job.error


def test_a_finished_job_is_not_planned_again_on_redelivery(tiny_version, pool):
    job = RescoreJob.objects.create(model_version=tiny_version, rebuild_queue=False)
    for chunk in scoring.plan_chunks(job=job, chunk_size=4):
        scoring.run_chunk(chunk_id=chunk.pk)
    assert RescoreJob.objects.get(pk=job.pk).state == JobState.SUCCEEDED
    assert scoring.plan_chunks(job=RescoreJob.objects.get(pk=job.pk)) == []
    assert RescoreChunk.objects.filter(job=job).count() == 2


# --- the chunk pipeline: reads and tokenizing ahead, writes behind, on one background thread -----


def stored_scores(version):
    steps = dict(StepScore.objects.filter(model_version=version).values_list("step_id", "p"))
    solutions = {row[0]: row[1:] for row in SolutionScore.objects.filter(model_version=version).values_list(
        "solution_id", "product", "min", "last", "mean", "sigma")}
    return steps, solutions


def io_threads():
    import threading

    return [thread for thread in threading.enumerate() if thread.name.startswith("rescore-io")]


@pytest.mark.embedded
def test_a_pipelined_chunk_writes_exactly_what_the_sequential_path_writes(tiny_version, pool):
    ids = [s.pk for s in pool]
    scores.score_solutions(model_version=tiny_version, solution_ids=ids)
    sequential = stored_scores(tiny_version)
    StepScore.objects.all().delete()
    SolutionScore.objects.all().delete()
    # Batches of 2: reads run ahead of the forward and writes behind it, several at a time.
    scored, tokens = scoring.score_chunk(model_version=tiny_version, solution_ids=ids, batch_size=2)
    steps, solutions = stored_scores(tiny_version)
    assert scored == len(pool) and steps.keys() == sequential[0].keys() and solutions.keys() == sequential[1].keys()
    assert [steps[k] for k in sorted(steps)] == pytest.approx([sequential[0][k] for k in sorted(steps)], abs=1e-6)
    for pk, row in solutions.items():
        assert row == pytest.approx(sequential[1][pk], abs=1e-6)
    assert tokens == registry.load(tiny_version).score_counting_tokens(scores.read_items(ids)[2])[1]
    assert not io_threads()


@pytest.mark.embedded
def test_a_pipelined_rerun_writes_nothing_and_skips_rows_already_there(tiny_version, pool):
    ids = [s.pk for s in pool]
    scoring.score_chunk(model_version=tiny_version, solution_ids=ids, batch_size=2)
    before = stored_scores(tiny_version)
    assert scoring.score_chunk(model_version=tiny_version, solution_ids=ids, batch_size=2) == (0, 0)
    # Solutions that lost their score are scored again; their step scores are there, kept as they were.
    SolutionScore.objects.filter(solution_id__in=ids[:3]).delete()
    assert scoring.score_chunk(model_version=tiny_version, solution_ids=ids, batch_size=2)[0] == 3
    steps, solutions = stored_scores(tiny_version)
    assert steps == before[0] and solutions.keys() == before[1].keys()
    for pk, row in solutions.items():  # recomputed in other batches: equal up to float rounding
        assert row == pytest.approx(before[1][pk], abs=1e-6)


def test_a_chunk_starts_and_ends_its_pipeline_with_short_batches():
    """The first read and the last write have no forward beside them: they are kept short."""
    batches = scoring.pipeline_batches(list(range(64)), 16)
    assert [len(batch) for batch in batches] == [4, 16, 16, 16, 8, 4]
    assert [pk for batch in batches for pk in batch] == list(range(64))
    assert scoring.pipeline_batches([1, 2, 3], 16) == [[1, 2, 3]]


@pytest.mark.embedded
def test_an_error_in_the_reader_thread_fails_the_chunk_and_stops_the_thread(tiny_version, pool, monkeypatch):
    read_items, calls = scores.read_items, []

    def failing_second_read(solution_ids):
        calls.append(solution_ids)
        if len(calls) == 2:
            raise RuntimeError("connection lost")
        return read_items(solution_ids)

    monkeypatch.setattr(scores, "read_items", failing_second_read)
    monkeypatch.setattr(scoring, "_pipeline_batch", lambda prm: 2)  # overlap on this CPU too, as on a GPU
    job = RescoreJob.objects.create(model_version=tiny_version, rebuild_queue=False)
    (chunk,) = scoring.plan_chunks(job=job, chunk_size=10)
    with pytest.raises(RuntimeError, match="connection lost"):
        scoring.run_chunk(chunk_id=chunk.pk)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and "chunk 0: RuntimeError: connection lost" in job.error
    assert RescoreChunk.objects.get(pk=chunk.pk).state != RescoreChunk.State.DONE
    assert not io_threads()


def test_a_forward_on_fewer_threads_than_cores_is_pipelined_in_larger_batches_and_scores_the_same(
        tiny_version, pool):
    """A worker on one torch thread leaves the other cores to its reader: the chunk goes in
    pipeline batches, larger than beside a forward off the CPU, and its scores are those of the
    one-batch path a forward on every core takes."""
    ids = [s.pk for s in pool]
    model = registry.load(tiny_version)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(len(os.sched_getaffinity(0)))
        assert scoring._pipeline_batch(model) is None
        scoring.score_chunk(model_version=tiny_version, solution_ids=ids, prm=model)
        whole = dict(StepScore.objects.filter(model_version=tiny_version).values_list("step_id", "p"))
        StepScore.objects.filter(model_version=tiny_version).delete()
        SolutionScore.objects.filter(model_version=tiny_version).delete()
        torch.set_num_threads(1)
        if len(os.sched_getaffinity(0)) > 1:
            assert scoring._pipeline_batch(model) == scoring.SHARED_CPU_BATCH > scoring.PIPELINE_BATCH
        scoring.score_chunk(model_version=tiny_version, solution_ids=ids, prm=model, batch_size=2)  # 4 batches
    finally:
        torch.set_num_threads(threads)
    piped = dict(StepScore.objects.filter(model_version=tiny_version).values_list("step_id", "p"))
    assert piped.keys() == whole.keys() and all(piped[k] == pytest.approx(whole[k], abs=1e-5) for k in whole)


# --- projects -------------------------------------------------------------------------------------


def run_inline(job: RescoreJob) -> RescoreJob:
    for chunk in scoring.plan_chunks(job=job, chunk_size=4):
        scoring.run_chunk(chunk_id=chunk.pk)
    return RescoreJob.objects.get(pk=job.pk)


@pytest.fixture
def two_pools(tiny_version):
    """Two projects with a pool each, a queue in the second, and a current model each."""
    gsm8k, math = two_projects()
    theirs_model = ModelVersion.objects.create(name="theirs", path="/x", weights_sha256="0" * 64, project=math)
    registry.set_current_model(tiny_version, project=gsm8k)
    registry.set_current_model(theirs_model, project=math)
    ours = [solution_in(gsm8k, steps=[f"Ours {n}: x = {n}.", "# Answer\n\n2"]) for n in range(5)]
    theirs = [solution_in(math, steps=[f"Theirs {n}: y = {n}."]) for n in range(5)]
    queueing.enqueue_imported(project=math, solution_ids=[s.pk for s in theirs])
    return gsm8k, math, ours, theirs


def math_state(math):
    queue = list(QueueItem.objects.filter(project=math).order_by("pk").values_list("pk", "solution", "status",
                                                                                      "generation", "priority"))
    scored = sorted(SolutionScore.objects.filter(solution__project=math).values_list("pk", "product"))
    return queue, scored, registry.current_model(math)


def test_rescoring_one_project_scores_and_requeues_it_and_leaves_the_other_alone(tiny_version, two_pools):
    gsm8k, math, ours, theirs = two_pools
    before = math_state(math)
    job = run_inline(scoring.start_rescore(model_version=tiny_version, project=gsm8k))
    assert job.state == JobState.SUCCEEDED and job.total == len(ours)
    assert set(SolutionScore.objects.filter(model_version=tiny_version).values_list("solution", flat=True)) == {
        s.pk for s in ours}
    queued = QueueItem.objects.filter(generation=job.generation, project=gsm8k)
    assert set(queued.values_list("solution", flat=True)) == {s.pk for s in ours}
    assert math_state(math) == before  # its queue, its scores and its current model
    assert registry.current_model(gsm8k) == tiny_version


def test_promoting_in_one_project_leaves_the_others_queue_scores_and_current_model_alone(tiny_version, two_pools):
    gsm8k, math, ours, _ = two_pools
    before = math_state(math)
    candidate = registry.register_model_version(name="candidate", path=tiny_version.path, project=gsm8k)
    promotion.promote(candidate, project=gsm8k)
    assert registry.current_model(gsm8k) == candidate
    job = run_inline(RescoreJob.objects.get(model_version=candidate))
    assert job.project == gsm8k and job.state == JobState.SUCCEEDED and job.total == len(ours)
    assert math_state(math) == before


def test_a_version_trained_in_one_project_may_be_promoted_in_another(tiny_version, two_pools):
    gsm8k, math, _, theirs = two_pools
    promotion.promote(tiny_version, project=math)  # tiny-beta is the first project's current model
    assert registry.current_model(math) == registry.current_model(gsm8k) == tiny_version
    job = run_inline(RescoreJob.objects.get(project=math))
    assert job.total == len(theirs)
    assert set(QueueItem.objects.filter(project=math, generation=job.generation).values_list("solution", flat=True)) \
        == {s.pk for s in theirs}
