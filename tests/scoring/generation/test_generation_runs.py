"""Generation runs: a pool filled from a real OpenAI-compatible server and from a local model,
duplicates counted, provenance kept, and a worker killed with -9 mid-run leaving no gap."""
import socket
from collections import Counter

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Sum

from annotate.models import Problem, Project, QueueItem, SampleLine, Solution
from bench.openai_server import ServerProcess
from jobs.states import JobState
from scoring.generation import runs as generation
from scoring.models import GenerationChunk, GenerationRun
from tests.conftest import WorkerProcess, wait_for
from tests.factories import ProblemFactory
from tests.scoring.projects import two_projects

TEMPLATE = "Problem: {problem}\nSolution:"


def make_problems(count: int, source: str = "gen-test") -> list[Problem]:
    return [Problem.objects.create(statement=f"What is {n} + {n}?", ground_truth_answer=str(2 * n), source=source,
                                   split="test", content_hash=Problem.hash_for(f"What is {n} + {n}?", str(2 * n)))
            for n in range(count)]


def run_samples(run: GenerationRun) -> list[int]:
    """The sample numbers the run wrote, one per SampleLine (its key in the pool)."""
    return sorted(SampleLine.objects.filter(file_digest=generation.run_digest(run)).values_list("line_no", flat=True))


def openai_spec(server: ServerProcess) -> dict:
    return {"backend": "openai", "base_url": server.base_url, "model": server.model_name, "concurrency": 4}


def one_problem_per_chunk(server: ServerProcess, *, problems: int) -> GenerationRun:
    """A recorded run of 2 short samples per problem, one problem a chunk, not sent to a worker."""
    make_problems(problems)
    return generation.start_generation_run(
        project=Project.objects.sole(),
        problem_filter={"source": "gen-test"}, samples_per_problem=2, generator_spec=openai_spec(server),
        sampling={"max_tokens": 8}, prompt_template=TEMPLATE, chunk_size=1, enqueue=False,
    )


@pytest.mark.django_db
def test_generate_solutions_fills_the_pool_from_a_real_server_with_provenance(openai_server, capsys):
    problems = make_problems(3)
    call_command("generate_solutions", "--source", "gen-test", "-n", "4", "--backend", "openai",
                 "--base-url", openai_server.base_url, "--model", openai_server.model_name,
                 "--max-tokens", "24", "--seed", "7", "--chunk-size", "2", "--temperature", "1.0")
    run = GenerationRun.objects.get()
    assert run.state == JobState.SUCCEEDED, run.error
    assert (run.done, run.total, run.chunks_done, run.chunks_total) == (3, 3, 2, 2)
    # Every sample is in the pool exactly once: 12 numbered samples, counted by their solutions.
    assert run_samples(run) == list(range(1, 13))
    solutions = Solution.objects.filter(meta__generation__run=run.pk)
    assert solutions.aggregate(n=Sum("sample_count"))["n"] == 12 == run.created + run.duplicates
    assert {s.problem_id for s in solutions} == {p.pk for p in problems}
    solution = solutions.first()
    provenance = solution.meta["generation"]
    assert solution.generator == f"openai:{openai_server.model_name}" == run.generator_name
    assert provenance["sampling"]["seed"] in (7, 8) and provenance["sampling"]["n"] == 4
    assert provenance["prompt_template"] == run.prompt_template and provenance["completion_tokens"] > 0
    assert solution.steps.exists() and solution.source == "generated"
    assert run.completion_tokens > 0 and run.prompt_tokens > 0 and run.retries == 0
    assert QueueItem.objects.filter(solution__in=solutions).count() == run.queued > 0
    assert f"Generation run {run.pk} succeeded" in capsys.readouterr().out


@pytest.mark.django_db
def test_identical_samples_are_one_solution_counted_n_times(openai_server):
    make_problems(2)
    run = generation.start_generation_run(
        project=Project.objects.sole(),
        problem_filter={"source": "gen-test"}, samples_per_problem=3, generator_spec=openai_spec(openai_server),
        sampling={"temperature": 0, "max_tokens": 16}, prompt_template=TEMPLATE, enqueue=False,
    )
    run = generation.run_generation(run_id=run.pk)
    assert run.state == JobState.SUCCEEDED, run.error
    # Greedy decoding writes the same text three times: labeled once, sampled three times.
    assert (run.created, run.duplicates) == (2, 4)
    assert sorted(Solution.objects.values_list("sample_count", flat=True)) == [3, 3]
    # Running the finished run again writes nothing.
    assert generation.run_generation(run_id=run.pk).created == 2 and len(run_samples(run)) == 6


@pytest.mark.django_db
def test_generate_solutions_fills_the_pool_from_a_local_model(tiny_causal_lm):
    make_problems(2)
    call_command("generate_solutions", "--source", "gen-test", "-n", "2", "--model", str(tiny_causal_lm),
                 "--max-tokens", "16", "--seed", "1")
    run = GenerationRun.objects.get()
    assert run.state == JobState.SUCCEEDED, run.error
    assert run.generator_name == "local:tiny-lm" and run_samples(run) == [1, 2, 3, 4]
    assert Solution.objects.aggregate(n=Sum("sample_count"))["n"] == 4 - run.skipped


@pytest.mark.django_db
def test_a_run_whose_attempt_died_after_its_last_chunk_is_finished_by_the_next(openai_server):
    run = one_problem_per_chunk(openai_server, problems=2)
    assert generation.plan_chunks(run=run)
    generator = generation.generator_for(run.generator_spec)
    for chunk in run.chunks.all():
        generation.generate_chunk(run=run, chunk=chunk, generator=generator)
    # The attempt's process is gone (a pid no process has) before it could end the run.
    GenerationRun.objects.filter(pk=run.pk).update(claimed_by=f"{socket.gethostname()}:{2**22 + 1}")
    run = generation.run_generation(run_id=run.pk)
    assert run.state == JobState.SUCCEEDED and (run.done, run.chunks_done) == (2, 2)
    assert run_samples(run) == [1, 2, 3, 4]


@pytest.mark.django_db
def test_a_run_past_its_time_budget_hands_itself_on_and_the_next_task_finishes_it(openai_server):
    run = one_problem_per_chunk(openai_server, problems=3)
    turns = []
    while not turns or turns[-1].state == JobState.PENDING:
        turns.append(generation.run_generation(run_id=run.pk, time_budget=0))  # one chunk per task
        assert len(turns) <= 3
    assert [(t.state, t.chunks_done) for t in turns] == [("pending", 1), ("pending", 2), ("succeeded", 3)]
    assert run_samples(run) == list(range(1, 7))


@pytest.mark.django_db
def test_a_bad_request_names_its_field_and_records_nothing():
    make_problems(1)
    bad = [
        ({"generator_spec": {"backend": "openai", "model": "m"}}, "base_url: required"),
        ({"problem_filter": {"source": "nowhere"}}, "problem_filter: matches no problem"),
        ({"problem_filter": {"problem_ids": [10**9]}}, "problem_ids: no problem"),
        ({"sampling": {"top_p": 2}}, "top_p must be in"),
        ({"prompt_template": "no field"}, "must contain {problem}"),
    ]
    for change, message in bad:
        options = {"project": Project.objects.sole(), "problem_filter": {"source": "gen-test"},
                   "samples_per_problem": 2,
                   "generator_spec": {"backend": "local"}, "enqueue": False, **change}
        with pytest.raises(ValueError, match=message):
            generation.start_generation_run(**options)
    assert not GenerationRun.objects.exists()
    with pytest.raises(CommandError, match="needs --base-url"):
        call_command("generate_solutions", "--backend", "openai")


@pytest.mark.worker
def test_a_worker_killed_mid_run_resumes_without_duplicate_or_missing_samples(tiny_causal_lm, transactional_db,
                                                                              tmp_path):
    # Every request waits a little, so the run is still going when the worker is killed.
    with ServerProcess(tiny_causal_lm, "--stall-every", "1", "--stall-seconds", "0.4", threads=1) as server:
        problems = make_problems(10)
        first = WorkerProcess(tmp_path / "worker-1.log")
        first.start()
        try:
            run = generation.start_generation_run(
                project=Project.objects.sole(),
                problem_filter={"source": "gen-test"}, samples_per_problem=3, generator_spec=openai_spec(server),
                sampling={"max_tokens": 12}, prompt_template=TEMPLATE, seed=3, chunk_size=1,
            )
            wait_for(lambda: GenerationRun.objects.get(pk=run.pk).chunks_done >= 2, timeout=120, interval=0.05)
        finally:
            first.kill()
        run.refresh_from_db()
        assert run.state == JobState.RUNNING and run.chunks_done < run.chunks_total, "run ended before the kill"

        # The next worker's start-up reconcile finds the run's holder dead and resends its task.
        second = WorkerProcess(tmp_path / "worker-2.log")
        second.start()
        try:
            wait_for(lambda: GenerationRun.objects.get(pk=run.pk).state != JobState.RUNNING, timeout=180)
        finally:
            second.stop()
    run.refresh_from_db()
    assert run.state == JobState.SUCCEEDED, run.error
    assert run_samples(run) == list(range(1, 31))  # no gap, no duplicate
    solutions = Solution.objects.filter(meta__generation__run=run.pk)
    assert solutions.aggregate(n=Sum("sample_count"))["n"] == 30 - run.skipped
    assert Counter(s.problem_id for s in solutions for _ in range(s.sample_count)) == {p.pk: 3 for p in problems}
    assert GenerationChunk.objects.filter(run=run, state="done").count() == 10


@pytest.mark.django_db
def test_the_admin_page_starts_a_run_and_its_page_polls_its_progress(client, admin_user, annotator):
    make_problems(2)
    client.force_login(annotator)
    assert client.get("/models/generation/").status_code == 403
    client.force_login(admin_user)
    form = {"source": "gen-test", "samples_per_problem": 2, "backend": "local", "mode": "completions",
            "temperature": 0.7, "max_tokens": 32, "prompt_template": TEMPLATE}
    refused = client.post("/models/generation/", {**form, "backend": "openai"})
    assert refused.status_code == 200 and b"base_url: required" in refused.content
    response = client.post("/models/generation/", form)
    run = GenerationRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/models/jobs/generation/{run.pk}/"
    assert run.generator_spec == {"backend": "local"} and run.samples_per_problem == 2
    page = client.get(response["Location"])
    assert b"Generation run" in page.content and b'hx-trigger="every 1s"' in page.content
    partial = client.get(response["Location"], headers={"HX-Request": "true"})
    assert b"<html" not in partial.content and b'id="job-progress"' in partial.content
    assert client.post(f"/models/jobs/generation/{run.pk}/cancel").status_code == 302
    run.refresh_from_db()
    assert run.state == JobState.CANCELLED and b"Cancelled" in client.get(response["Location"]).content


@pytest.mark.django_db
def test_a_run_takes_its_projects_problems_only():
    gsm8k, math = two_projects()
    ours = ProblemFactory(project=gsm8k, source="gen-test")
    theirs = ProblemFactory(project=math, source="gen-test")
    assert generation.select_problems({"source": "gen-test"}, project=gsm8k) == [ours.pk]
    with pytest.raises(ValueError, match=f"problem_ids: no problem {theirs.pk}"):
        generation.select_problems({"problem_ids": [theirs.pk]}, project=gsm8k)
    with pytest.raises(ValueError, match="matches no problem in math"):
        generation.start_generation_run(project=math, problem_filter={"source": "other"}, samples_per_problem=1,
                                        generator_spec={"backend": "local"}, enqueue=False)
    run = generation.start_generation_run(project=math, problem_filter={"source": "gen-test"}, samples_per_problem=1,
                                          generator_spec={"backend": "local"}, enqueue=False)
    assert run.project == math
