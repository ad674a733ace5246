"""Judge labeling jobs (scoring.generation.judge_labeling, label_judge) through the real stand-in server:
verdicts and critiques stored as judge labels, unreadable answers kept raw and counted, resume."""
import io
import itertools
import json
import math

import pytest
from django.core.management import CommandError, call_command

from annotate.models import AutoLabelRun, AutoStepLabel, JudgeAnswer, Project
from annotate.pool import importing
from bench.openai_server import ServerProcess
from jobs.states import JobState
from scoring.generation import judge_labeling, judging
from scoring.generation.generators import SamplingParams
from scoring.generation.labeling_jobs import load_generator
from scoring.models import JudgeLabelJob
from steps import verification
from tests.conftest import TEST_DATA, WorkerProcess, wait_for
from tests.factories import ProblemFactory, SolutionFactory

PROBLEM_NUMBERS = itertools.count()
GOOD_TWO = "Adds correctly.\nStep 1: correct\n\nDoubles correctly.\nStep 2: correct\n"
SECOND_WRONG = "Adds correctly.\nStep 1: correct\n\n5 times 2 is 10, not 12.\nStep 2: incorrect\n"


@pytest.fixture
def judge_server(tiny_causal_lm, tmp_path):
    """Start the stand-in server serving these scripted answers, in turn; stopped after the test."""
    servers = []

    def start(*answers: dict) -> ServerProcess:
        path = tmp_path / f"answers-{len(servers)}.json"
        path.write_text(json.dumps(list(answers)))
        servers.append(ServerProcess(tiny_causal_lm, "--answers", str(path), threads=1).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def spec_of(server: ServerProcess, **options) -> dict:
    return {"backend": "openai", "base_url": server.base_url, "model": server.model_name, "concurrency": 1,
            **options}


def solution(*steps: str, **fields):
    problem = ProblemFactory(statement=f"What is (2 + 3) * 2? (problem {next(PROBLEM_NUMBERS)})",
                             ground_truth_answer=None)
    return SolutionFactory(problem=problem, steps=list(steps), **fields)


def run_inline(job: JudgeLabelJob) -> JudgeLabelJob:
    while judge_labeling.run_judge_job(job_id=job.pk, resend=False).state == JobState.PENDING:
        pass
    return JudgeLabelJob.objects.select_related("run").get(pk=job.pk)


def start(solutions, spec: dict, **options) -> JudgeLabelJob:
    return judge_labeling.start_judge_labeling(project=Project.objects.sole(), solution_ids=[s.pk for s in solutions],
                                               generator_spec=spec, enqueue=False, **options)


def labels_of(run, solution_row):
    rows = AutoStepLabel.objects.filter(run=run, step__solution=solution_row).order_by("step__index")
    return [(label.step.index, label.soft, label.critique) for label in rows]


@pytest.mark.django_db
def test_verdicts_and_critiques_are_stored_as_judge_labels_with_the_runs_provenance_and_tokens(judge_server):
    server = judge_server({"text": GOOD_TWO}, {"text": SECOND_WRONG})
    right, wrong = solution("2 + 3 = 5", "5 * 2 = 10"), solution("2 + 3 = 5", "5 * 2 = 12", "# Answer\n\n12")
    job = run_inline(start([right, wrong], spec_of(server)))
    assert (job.state, job.done, job.total, job.unparseable) == (JobState.SUCCEEDED, 2, 2, 0)
    run = job.run
    assert labels_of(run, right) == [(0, 1.0, "Adds correctly."), (1, 1.0, "Doubles correctly.")]
    # The steps after the judge's first "incorrect" stay unlabeled.
    assert labels_of(run, wrong) == [(0, 1.0, "Adds correctly."), (1, 0.0, "5 times 2 is 10, not 12.")]
    assert run.method == AutoLabelRun.Method.JUDGE and run.source == f"openai:{server.base_url}/{server.model_name}"
    assert run.params["prompt_version"] == judging.prompt_version(verification.DEFAULT_TEMPLATE)
    assert run.params["template"] == verification.DEFAULT_TEMPLATE and run.params["generator"]["backend"] == "openai"
    assert run.params["sampling"]["temperature"] == 0.0 and run.params["sampling"]["logprobs"] == judging.TOP_LOGPROBS
    answers = JudgeAnswer.objects.filter(run=run).order_by("solution_id")
    assert [(a.text, a.parsed, a.error) for a in answers] == [(GOOD_TWO, True, ""), (SECOND_WRONG, True, "")]
    assert all(a.prompt_tokens > 0 and a.completion_tokens > 0 for a in answers)
    assert run.tokens == sum(a.completion_tokens for a in answers)
    # Judge labels are a source of their own: never "automatic", never human.
    assert not AutoStepLabel.objects.automatic().filter(run=run).exists()
    assert AutoStepLabel.objects.judged().filter(run=run).count() == 4


@pytest.mark.django_db
def test_a_malformed_truncated_too_long_slow_or_foreign_answer_is_stored_unparseable_and_counted(judge_server):
    too_long = "This step is fine. " * 1200 + "\nStep 1: correct\nStep 2: correct\n"
    server = judge_server(
        {"text": "Both steps look right to me."},
        {"text": "Adds correctly.\nStep 1: correct\n\nDoub", "finish_reason": "length"},
        {"text": too_long},
        {"text": GOOD_TWO, "delay": 3},
        {"text": "Addition juste.\nÉtape 1 : correcte\n\nÉtape 2 : correcte\n"},
        {"text": GOOD_TWO},
    )
    solutions = [solution("2 + 3 = 5", "5 * 2 = 10") for _ in range(6)]
    job = run_inline(start(solutions, spec_of(server, timeout=1.0, max_retries=0)))
    assert (job.state, job.done, job.unparseable) == (JobState.SUCCEEDED, 6, 5)
    answers = list(JudgeAnswer.objects.filter(run=job.run).order_by("solution_id"))
    reasons = [answer.error for answer in answers]
    assert [a.parsed for a in answers] == [False] * 5 + [True]
    assert reasons[0].startswith("no verdicts") and reasons[1].startswith("truncated")
    assert reasons[2].startswith("too long") and "the call failed: APITimeoutError" in reasons[3]
    assert reasons[4].startswith("no verdicts")
    # The raw text is kept (cut at its limit; the slow one never came); only the readable answer gave labels.
    assert answers[0].text == "Both steps look right to me." and answers[4].text.startswith("Addition juste.")
    assert answers[2].text == too_long[:JudgeAnswer.MAX_TEXT_CHARS] and answers[3].text == ""
    assert AutoStepLabel.objects.filter(run=job.run).count() == 2
    assert labels_of(job.run, solutions[5])[1] == (1, 1.0, "Doubles correctly.")


@pytest.mark.django_db
def test_a_nul_in_an_answer_is_dropped_from_the_stored_text_and_critique(judge_server):
    server = judge_server({"text": "Adds\u0000 correctly.\nStep 1: correct\n"})
    one_step = solution("2 + 3 = 5")
    job = run_inline(start([one_step], spec_of(server)))
    assert job.state == JobState.SUCCEEDED and JudgeAnswer.objects.get(run=job.run).text.startswith("Adds correctly.")
    assert labels_of(job.run, one_step) == [(0, 1.0, "Adds correctly.")]


@pytest.mark.django_db
def test_a_job_cancelled_while_it_works_stops_after_the_solution_in_hand(judge_server):
    server = judge_server({"text": GOOD_TWO})
    solutions = [solution("2 + 3 = 5", "5 * 2 = 10") for _ in range(3)]
    job = start(solutions, spec_of(server))
    judge = judge_labeling.judge_solution

    def judge_then_cancel(**kwargs):
        judge(**kwargs)
        judge_labeling.cancel_judge_job(job=JudgeLabelJob.objects.get(pk=job.pk))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(judge_labeling, "judge_solution", judge_then_cancel)
        stopped = judge_labeling.run_judge_job(job_id=job.pk, resend=False)
    assert stopped.state == JobState.CANCELLED and JudgeAnswer.objects.filter(run=job.run).count() == 1


def logprobs_for(text: str, verdict: str, p_good: float) -> list:
    """`text` token by line, the verdict's own token (after "Step 1: ") with these alternatives."""
    tokens = []
    for line in text.splitlines(keepends=True):
        if line.startswith("Step 1: "):
            alternatives = {"correct": math.log(p_good), "incorrect": math.log(1 - p_good)}
            tokens += [["Step 1: ", -0.01, {}], [line.removeprefix("Step 1: "), -0.1, alternatives]]
        else:
            tokens.append([line, -0.5, {}])
    return tokens


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["completions", "chat"])
def test_the_verdicts_probability_is_read_from_the_servers_logprobs(judge_server, mode):
    text = "Adds correctly, I think.\nStep 1: correct\n"
    server = judge_server({"text": text, "logprobs": logprobs_for(text, "correct", 0.8)})
    one_step = solution("2 + 3 = 5")
    job = run_inline(start([one_step], spec_of(server, mode=mode)))
    assert [soft for _, soft, _ in labels_of(job.run, one_step)] == [pytest.approx(0.8)]


@pytest.mark.django_db
def test_a_rerun_and_chunked_runs_judge_each_solution_once_and_count_its_tokens_once(judge_server):
    server = judge_server({"text": GOOD_TWO})
    solutions = [solution("2 + 3 = 5", "5 * 2 = 10") for _ in range(3)]
    job = start(solutions, spec_of(server))
    first = judge_labeling.run_judge_job(job_id=job.pk, chunk_seconds=0, resend=False)
    assert first.state == JobState.PENDING and first.done == 1  # one solution per zero-second chunk
    job = run_inline(job)
    assert judge_labeling.judge_solution(job=job, solution=solutions[0], generator=load_generator(
        job.generator_spec)) is False  # a duplicate attempt (a redelivered task) writes nothing
    assert run_inline(job).done == 3  # and running the finished job again judges nothing
    run = AutoLabelRun.objects.get(pk=job.run_id)
    assert JudgeAnswer.objects.filter(run=run).count() == 3 and AutoStepLabel.objects.filter(run=run).count() == 6
    assert run.tokens == sum(JudgeAnswer.objects.filter(run=run).values_list("completion_tokens", flat=True))


@pytest.mark.django_db
def test_gold_reference_and_stepless_solutions_are_skipped_and_no_known_answer_is_needed(judge_server):
    judged = solution("2 + 3 = 5")
    skipped = [solution("x", is_gold=True), solution("x", is_reference=True), SolutionFactory(steps=[])]
    job = start([judged, *skipped], {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"})
    assert (job.solution_ids, job.skipped, job.total) == ([judged.pk], 3, 1)


@pytest.mark.django_db
def test_the_prompt_template_comes_from_the_setting_and_must_name_problem_and_steps(settings):
    settings.STEPWISE_JUDGE_PROMPT = "Check {problem} by its steps:\n{steps}\nVerdicts: Step N: correct|incorrect"
    spec = {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
    job = judge_labeling.start_judge_labeling(generator_spec=spec, enqueue=False)
    assert job.run.params["template"] == settings.STEPWISE_JUDGE_PROMPT
    assert job.run.params["prompt_version"] == judging.prompt_version(settings.STEPWISE_JUDGE_PROMPT)
    with pytest.raises(ValueError, match=r"\{steps\}"):
        judge_labeling.start_judge_labeling(generator_spec=spec, template="Check {problem}", enqueue=False)


@pytest.mark.django_db
def test_the_local_model_as_judge_runs_end_to_end_and_its_unreadable_answer_is_stored_as_such(tiny_causal_lm):
    one = solution("2 + 3 = 5", "5 * 2 = 10")
    job = run_inline(start([one], {"backend": "local", "model": str(tiny_causal_lm), "device": "cpu"},
                           params=SamplingParams(max_tokens=12)))
    answer = JudgeAnswer.objects.get(run=job.run)
    assert job.state == JobState.SUCCEEDED and job.done == 1 and job.run.source == f"local:{tiny_causal_lm.name}"
    assert job.run.params["sampling"]["logprobs"] == judging.TOP_LOGPROBS  # a local judge gives them too
    if not answer.parsed:  # a tiny random model writes noise: kept raw, counted, nothing guessed
        assert job.unparseable == 1 and answer.error and answer.completion_tokens > 0
        assert not AutoStepLabel.objects.filter(run=job.run).exists()


def call_command_output(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_label_judge_command_judges_inline_and_reports_answers_unparseable_and_tokens(judge_server):
    server = judge_server({"text": GOOD_TWO}, {"text": "no idea"})
    first, second = solution("2 + 3 = 5", "5 * 2 = 10"), solution("2 + 3 = 5", "5 * 2 = 10")
    out = call_command_output("label_judge", "--generator", json.dumps(spec_of(server)), "--solution-ids",
                              f"{first.pk},{second.pk}", "--max-tokens", "200", "--inline")
    assert "2 solutions to judge (0 skipped)" in out
    assert "judged 2 solutions: 1 answers read, 1 unparseable (kept raw);" in out and "tokens generated" in out
    run = AutoLabelRun.objects.get(method=AutoLabelRun.Method.JUDGE)
    assert run.params["sampling"]["max_tokens"] == 200 and run.labels.count() == 2


def test_label_judge_command_names_a_bad_option(db):
    with pytest.raises(CommandError, match="--solution-ids 'x,1'"):
        call_command("label_judge", "--solution-ids", "x,1", "--inline")
    with pytest.raises(CommandError, match="--generator: not valid JSON"):
        call_command("label_judge", "--generator", "{nope", "--inline")


@pytest.mark.worker
def test_a_worker_killed_mid_job_resumes_it_judging_each_solution_once(transactional_db, tmp_path, judge_server):
    server = judge_server({"text": GOOD_TWO, "delay": 0.3})
    solutions = [solution("2 + 3 = 5", "5 * 2 = 10") for _ in range(16)]
    job = judge_labeling.start_judge_labeling(project=Project.objects.sole(), solution_ids=[s.pk for s in solutions],
                                              generator_spec=spec_of(server))  # its task sent on commit
    worker = WorkerProcess(tmp_path / "worker.log")
    worker.start()
    try:
        wait_for(lambda: JudgeLabelJob.objects.get(pk=job.pk).done >= 2, timeout=90)
        worker.kill()
        killed = JudgeLabelJob.objects.get(pk=job.pk)
        assert killed.state == JobState.RUNNING and killed.done < killed.total
        worker = WorkerProcess(tmp_path / "worker-2.log")
        worker.start()  # the reconciler resends the task of the job whose holder died
        wait_for(lambda: JudgeLabelJob.objects.get(pk=job.pk).state == JobState.SUCCEEDED, timeout=120)
    finally:
        worker.stop()
    answers = JudgeAnswer.objects.filter(run=job.run_id)
    assert sorted(answers.values_list("solution_id", flat=True)) == sorted(s.pk for s in solutions)
    assert AutoStepLabel.objects.filter(run=job.run_id).count() == 2 * len(solutions)
    run = AutoLabelRun.objects.get(pk=job.run_id)
    assert run.tokens == sum(answers.values_list("completion_tokens", flat=True))


@pytest.mark.slow
@pytest.mark.django_db
def test_the_default_local_model_judges_a_real_model_response_end_to_end(tmp_path):
    """SmolLM2-135M as judge (`--generator default`) on a real Qwen2.5-Math response: whatever it writes is stored."""
    line = json.loads((TEST_DATA / "model-responses" / "math_qwen25_cot_20x8.jsonl").read_text().splitlines()[0])
    path = tmp_path / "pool.jsonl"
    path.write_text(json.dumps({"problem": line["question"], "ground_truth_answer": line["answer"],
                                "solution": line["response"][0], "generator": "qwen2.5-math"}) + "\n")
    importing.import_pool(project=Project.objects.sole(), path=path)
    out = call_command_output("label_judge", "--generator", "default", "--limit", "1", "--max-tokens", "48",
                              "--inline")
    answer = JudgeAnswer.objects.get()
    assert "judged 1 solutions" in out and answer.text and answer.completion_tokens > 0
    assert answer.parsed or answer.error  # read, or kept raw with why not: never guessed
    if not answer.parsed:
        assert not AutoStepLabel.objects.filter(run=answer.run).exists()
