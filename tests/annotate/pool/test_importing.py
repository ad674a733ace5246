"""Importing JSONL files into the pool: formats, grading, bad lines, idempotence, the report."""
import json
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils.html import escape

from annotate.management.commands import import_pool
from annotate.models import ImportJob, Problem, Project, Solution, Step
from annotate.pool import importing
from annotate.tasks import import_pool_task
from annotate.web.api import serializers
from jobs.states import JobState
from steps.grading import judge
from tests.annotations import PHASE2_LINE
from tests.conftest import TEST_DATA, option_choices

pytestmark = [pytest.mark.embedded, pytest.mark.django_db]

REPORT_KEYS = ["line", "status", "solution", "answer", "is_correct", "n_steps", "error", "note"]


def write(tmp_path: Path, lines: list, name: str = "pool.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def read_report(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def generic(n: int, **fields) -> dict:
    line = {"problem": f"What is {n} + {n}?", "ground_truth_answer": str(2 * n),
            "steps": [f"{n} + {n} = {2 * n}.", f"# Answer\n\n{2 * n}"]}
    line.update(fields)
    return line


@pytest.mark.slow
@pytest.mark.parametrize(("relative", "format", "lines"), [
    ("gsm8k/train.jsonl", "gsm8k", 7473),
    ("gsm8k/test.jsonl", "gsm8k", 1319),
    ("math500/test.jsonl", "math", 500),
])
def test_real_datasets_import_in_full_with_every_reference_graded_correct(tmp_path, relative, format, lines):
    report_path = tmp_path / "report.jsonl"
    summary = importing.import_pool(project=Project.objects.sole(), path=TEST_DATA / relative, report_path=report_path)
    assert summary.format == format
    assert (summary.lines, summary.created, summary.errors) == (lines, lines, 0), summary.first_errors
    report = read_report(report_path)
    assert [entry["line"] for entry in report] == list(range(1, lines + 1))
    assert {entry["status"] for entry in report} == {"created"}
    assert all(entry["is_correct"] is True and entry["n_steps"] >= 1 for entry in report)
    assert Solution.objects.filter(is_reference=True, is_correct=True).count() == lines
    assert not Solution.objects.exclude(is_correct=True).exists()
    # Every reference solution is its problem's ground truth, graded against the problem's answer.
    for solution in Solution.objects.select_related("problem").order_by("?")[:50]:
        assert solution.problem.ground_truth_solution
        assert solution.final_answer == solution.problem.ground_truth_answer


def test_gsm8k_reference_becomes_ground_truth_and_a_known_correct_solution(tmp_path):
    answer = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips.\n#### 72"
    question = "Natalia sold clips to 48 of her friends in April, and half as many in May. How many in all?"
    importing.import_pool(project=Project.objects.sole(),
                          path=write(tmp_path, [{"question": question, "answer": answer}], "train.jsonl"))
    problem = Problem.objects.get()
    assert (problem.statement, problem.ground_truth_answer, problem.ground_truth_solution) == (question, "72", answer)
    assert (problem.source, problem.split) == ("gsm8k", "train")
    solution = problem.solutions.get()
    assert (solution.is_reference, solution.is_correct, solution.final_answer) == (True, True, "72")
    # One step per line; calculator annotations stay in the stored text.
    assert [s.text for s in solution.steps.all()] == answer.split("\n")


def test_a_reference_solution_with_one_wrong_step_is_graded_wrong(tmp_path):
    # Made by perturbing a real GSM8K reference: the second step and the final answer go wrong.
    right = {"question": "Weng earns $12 an hour. She worked 50 minutes. How much did she earn?",
             "answer": "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\n"
                       "She earned 0.2 x 50 = $<<0.2*50=10>>10.\n#### 10"}
    wrong = {"problem": right["question"], "ground_truth_answer": "10",
             "solution": "Weng earns 12/60 = $0.2 per minute.\nShe earned 0.2 x 60 = $12.\n#### 12"}
    importing.import_pool(project=Project.objects.sole(), path=write(tmp_path, [right], "a.jsonl"))
    report_path = tmp_path / "r.jsonl"
    importing.import_pool(project=Project.objects.sole(),
                          path=write(tmp_path, [wrong], "b.jsonl"), report_path=report_path)
    [entry] = read_report(report_path)
    assert (entry["answer"], entry["is_correct"], entry["n_steps"]) == ("12", False, 3)
    assert Problem.objects.count() == 1  # the same problem, found by its content hash
    assert sorted(Solution.objects.values_list("is_correct", flat=True)) == [False, True]


def test_math_lines_take_the_answer_from_boxed_or_the_answer_line(tmp_path):
    lines = [
        {"problem": "Compute $\\frac{1}{2}+\\frac{1}{4}$.",
         "solution": "We get $\\frac{2}{4}+\\frac14$.\n\nSo $\\boxed{\\frac{3}{4}}$."},
        {"question": "What is $2^{10}$?", "answer": "$2^{10} = 1024$.\n\nThe answer is: 1,\\!024"},
        {"problem": "Solve $x+1=3$.", "solution": "Subtract: $x=\\boxed{2}$.", "answer": "2", "level": "Level 1"},
    ]
    importing.import_pool(project=Project.objects.sole(), path=write(tmp_path, lines), format="math")
    got = {
        s.problem.ground_truth_answer: (s.final_answer, s.is_correct, s.steps.count())
        for s in Solution.objects.select_related("problem")
    }
    assert got == {"\\frac{3}{4}": ("\\frac{3}{4}", True, 2), "1,\\!024": ("1,\\!024", True, 2), "2": ("2", True, 1)}
    assert Solution.objects.get(problem__ground_truth_answer="2").meta == {"level": "Level 1"}


def test_generic_lines_take_steps_or_split_solution_text_and_grade_answers(tmp_path):
    lines = [
        generic(1),
        generic(2, steps=None, solution="2 + 2 = 5.\n\nSo it is 5.\n\n# Answer\n\n5", source="model-a",
                generator="llama", meta={"sample": 3}),
        generic(3, steps=["I guess."], answer="6.0"),
        generic(4, steps=["I give up."]),
    ]
    del lines[1]["steps"]
    report_path = tmp_path / "r.jsonl"
    summary = importing.import_pool(project=Project.objects.sole(),
                                    path=write(tmp_path, lines), report_path=report_path)
    assert (summary.format, summary.created, summary.errors) == ("generic", 4, 0)
    report = read_report(report_path)
    assert [(e["answer"], e["is_correct"], e["n_steps"]) for e in report] == [
        ("2", True, 2), ("5", False, 3), ("6.0", True, 1), (None, False, 1),
    ]
    assert Solution.objects.get(pk=report[3]["solution"]).grading_note == "no final answer found in the solution"
    assert Solution.objects.get(pk=report[0]["solution"]).grading_note == ""
    second = Solution.objects.get(pk=report[1]["solution"])
    assert (second.source, second.generator, second.meta) == ("model-a", "llama", {"sample": 3})
    assert Solution.objects.get(pk=report[0]["solution"]).source == "generic"


def test_the_source_option_names_where_everything_came_from(tmp_path):
    importing.import_pool(project=Project.objects.sole(),
                          path=write(tmp_path, [generic(1, source="ignored")]), source="run-7")
    assert Solution.objects.get().source == Problem.objects.get().source == "run-7"


def _generic_text(n: int, solution: str) -> dict:
    line = generic(n, solution=solution)
    del line["steps"]
    return line


def _step_texts(n: int) -> list[str]:
    """The steps of the solution to ``generic(n)``'s problem."""
    steps = Step.objects.filter(solution__problem__statement=f"What is {n} + {n}?").order_by("index")
    return list(steps.values_list("text", flat=True))


def test_step_splitting_can_be_chosen_per_import(tmp_path):
    text = "One is 1.\nTwo is 2.\n\nThree is 3.\n\n# Answer\n\n3"
    modes = ["line", "blank_line", "sentence", "lines", "blank"]
    for n, mode in enumerate(modes, start=1):
        importing.import_pool(project=Project.objects.sole(),
                              path=write(tmp_path, [_generic_text(n, text)]), split_mode=mode)
    by_line = ["One is 1.", "Two is 2.", "Three is 3.", "# Answer\n\n3"]
    by_paragraph = ["One is 1.\nTwo is 2.", "Three is 3.", "# Answer\n\n3"]
    assert [_step_texts(n) for n in range(1, 6)] == [by_line, by_paragraph, by_line, by_line, by_paragraph]
    with pytest.raises(ValueError, match="unknown split mode"):
        importing.import_pool(project=Project.objects.sole(), path=write(tmp_path, [generic(9)]), split_mode="words")


def _real_response() -> dict:
    with open(TEST_DATA / "model-responses" / "math_qwen25_cot_20x8.jsonl") as handle:
        line = json.loads(next(handle))
    return {"problem": line["question"], "ground_truth_answer": line["answer"], "solution": line["response"][0],
            "generator": "qwen2.5-math"}


def test_a_real_model_response_imports_with_each_lead_in_kept_with_the_equation_it_introduces(tmp_path):
    importing.import_pool(project=Project.objects.sole(), path=write(tmp_path, [_real_response()]))
    steps = list(Step.objects.order_by("index").values_list("text", flat=True))
    assert not [step for step in steps[:-1] if step.rstrip("*").endswith(":")]
    assert not [step for step in steps if step.startswith("\\[")]
    assert Solution.objects.get().is_correct is True  # the \boxed{} answer is still found
    lead_in = "the total number of possible outcomes when two dice are rolled is:\n   \\[\n   6 \\times 6 = 36\n   \\]"
    assert any(lead_in in step for step in steps)


def test_lines_may_give_their_steps_explicitly_and_explicit_mode_requires_it(tmp_path):
    math_line = {"problem": "What is $1+1$?", "solution": "We add: $1+1=\\boxed{2}$.",
                 "steps": ["We add.", "So $1+1=\\boxed{2}$."]}
    importing.import_pool(project=Project.objects.sole(),
                          path=write(tmp_path, [math_line], "math.jsonl"), split_mode="explicit")
    solution = Solution.objects.get()
    assert [step.text for step in solution.steps.order_by("index")] == math_line["steps"]
    assert solution.meta == {} and solution.is_correct is True
    report_path = tmp_path / "r.jsonl"
    importing.import_pool(project=Project.objects.sole(),
                          path=write(tmp_path, [generic(2), _generic_text(3, "So it is 6.")]), split_mode="explicit",
                          report_path=report_path)
    assert _step_texts(2) == generic(2)["steps"] and _step_texts(3) == []
    error = read_report(report_path)[1]["error"]
    assert "steps" in error and "explicit" in error


def test_the_import_command_and_the_upload_job_take_a_split_mode(tmp_path, client, admin_user):
    text = "One is 1.\nTwo is 2."
    call_command("import_pool", str(write(tmp_path, [_generic_text(1, text)])), "--split", "line")
    assert _step_texts(1) == ["One is 1.", "Two is 2."]
    with pytest.raises(CommandError):
        call_command("import_pool", str(write(tmp_path, [generic(1)])), "--split", "words")
    client.force_login(admin_user)
    upload = write(tmp_path, [_generic_text(2, text)], "upload.jsonl")
    with open(upload, "rb") as handle:
        client.post(reverse("annotate:import-list"), {"file": handle, "format": "auto", "split_mode": "blank_line"})
    job = ImportJob.objects.get(original_name="upload.jsonl")
    assert job.split_mode == "blank_line"
    importing.run_import_job(job_id=job.pk)
    assert _step_texts(2) == ["One is 1.\nTwo is 2."]
    with open(write(tmp_path, [_generic_text(3, text)], "api.jsonl"), "rb") as handle:
        created = client.post("/api/imports", {"file": handle, "split_mode": "line"})
    assert created.status_code == 201 and created.json()["split_mode"] == "line"
    importing.run_import_job(job_id=created.json()["id"])
    assert _step_texts(3) == ["One is 1.", "Two is 2."]


def test_report_has_one_entry_per_line_in_the_documented_shape(tmp_path):
    report_path = tmp_path / "out" / "report.jsonl"
    path = write(tmp_path, [generic(1), "{broken", generic(1)])
    importing.import_pool(project=Project.objects.sole(), path=path, report_path=report_path)
    report = read_report(report_path)
    assert [list(entry) for entry in report] == [REPORT_KEYS] * 3
    created, error, duplicate = report
    solution = Solution.objects.get()
    assert created == {"line": 1, "status": "created", "solution": solution.pk, "answer": "2",
                       "is_correct": True, "n_steps": 2, "error": None, "note": None}
    assert error["status"] == "error" and error["solution"] is None
    assert error["error"].startswith("field 'line': is not valid JSON")
    assert duplicate == {**created, "line": 3, "status": "duplicate"}


def test_bad_lines_are_reported_by_line_and_field_and_the_rest_imports(tmp_path):
    lines = [
        generic(1),
        '{"problem": "What is 1+1?", "ground_truth_answer": "2", "steps": ["1+1=2"',
        {"ground_truth_answer": "4", "steps": ["2+2=4"]},
        generic(4, steps="one long step"),
        generic(5, ground_truth_answer=10),
        "[1, 2, 3]",
        "",
        generic(6),
    ]
    report_path = tmp_path / "r.jsonl"
    summary = importing.import_pool(project=Project.objects.sole(),
                                    path=write(tmp_path, lines), format="generic", report_path=report_path)
    assert (summary.lines, summary.created, summary.errors) == (7, 2, 5)
    errors = {e["line"]: e["error"] for e in read_report(report_path) if e["status"] == "error"}
    assert errors[2].startswith("field 'line': is not valid JSON")
    assert errors[3] == "field 'problem': is missing"
    assert errors[4] == "field 'steps': must be a non-empty list of strings, got a string"
    assert errors[5] == "field 'ground_truth_answer': must be a string, got int"
    assert errors[6] == "field 'line': must be a JSON object, got a list"
    assert summary.first_errors[0].startswith("line 2: field 'line'")
    assert Solution.objects.count() == 2


def test_an_atomic_import_with_a_bad_line_writes_nothing(tmp_path):
    report_path = tmp_path / "r.jsonl"
    path = write(tmp_path, [generic(1), generic(2), {"problem": "no answer", "steps": ["x"]}])
    summary = importing.import_pool(project=Project.objects.sole(),
                                    path=path, format="generic", atomic=True, report_path=report_path)
    assert summary.rolled_back and not summary.ok
    assert (summary.created, summary.errors) == (0, 1)
    assert not Problem.objects.exists() and not Solution.objects.exists() and not Step.objects.exists()
    report = read_report(report_path)
    assert {e["status"] for e in report} == {"error"}
    assert report[0]["error"] == "not imported: the import is atomic and 1 line(s) failed"
    assert report[2]["error"] == "field 'ground_truth_answer': is missing"
    # The same file without the bad line imports in full.
    path = write(tmp_path, [generic(1), generic(2)])
    assert importing.import_pool(project=Project.objects.sole(), path=path, atomic=True).created == 2


def test_reimporting_a_file_creates_nothing_new(tmp_path):
    path = write(tmp_path, [generic(n) for n in range(1, 30)])
    first = importing.import_pool(project=Project.objects.sole(), path=path, batch_size=7)
    counts = (Problem.objects.count(), Solution.objects.count(), Step.objects.count())
    second = importing.import_pool(project=Project.objects.sole(), path=path, batch_size=7)
    assert (first.created, second.created, second.duplicates) == (29, 0, 29)
    assert (Problem.objects.count(), Solution.objects.count(), Step.objects.count()) == counts == (29, 29, 58)


def test_progress_is_reported_per_batch_up_to_the_line_count(tmp_path):
    calls = []
    path = write(tmp_path, [generic(n) for n in range(25)])
    importing.import_pool(project=Project.objects.sole(),
                          path=path, batch_size=10, progress=lambda done, total, s: calls.append((done, total)))
    assert calls == [(10, 25), (20, 25), (25, 25)]


def test_a_file_in_no_known_format_is_rejected_line_by_line(tmp_path):
    summary = importing.import_pool(project=Project.objects.sole(),
                                    path=write(tmp_path, [{"text": "hello"}, {"text": "again"}]))
    assert (summary.format, summary.errors) == ("auto", 2)
    assert "format not recognised" in summary.first_errors[0]


def test_the_format_is_detected_from_the_first_valid_line():
    assert importing.detect_format({"question": "q", "answer": "a\n#### 3"}) == "gsm8k"
    assert importing.detect_format({"question": "q", "answer": "\\boxed{3}"}) == "math"
    assert importing.detect_format({"problem": "q", "solution": "\\boxed{3}"}) == "math"
    assert importing.detect_format({"problem": "q", "ground_truth_answer": "3", "steps": []}) == "generic"
    assert importing.detect_format({"question": {"problem": "q"}, "label": {}}) == "prm800k"


# One line of every registered import format (a new format adds one here).
SAMPLE_LINES = {
    "prm800k": PHASE2_LINE,
    "gsm8k": {"question": "Tom has 3 apples and buys 4 more. How many?", "answer": "3 + 4 = 7.\n#### 7"},
    "math": {"problem": "What is $2 + 5$?", "solution": "$2 + 5 = \\boxed{7}$."},
    "generic": generic(3),
    "math_shepherd": {"input": "What is 2 + 5? Step 1: 2 + 5 = 7. ки\nStep 2: The answer is: 7 ки",
                      "label": "What is 2 + 5? Step 1: 2 + 5 = 7. +\nStep 2: The answer is: 7 +", "task": "GSM8K"},
    "processbench": {"id": "gsm8k-0", "generator": "Qwen2-7B-Instruct", "problem": "What is 10 - 4?",
                     "steps": ["10 - 4 = 6.", "The answer is \\boxed{6}."], "final_answer_correct": True,
                     "label": -1},
}


def test_every_registered_import_format_has_a_sample_line_here():
    assert set(SAMPLE_LINES) == set(importing.FORMATS)


@pytest.mark.parametrize("name", SAMPLE_LINES)
def test_every_registered_import_format_is_offered_detected_and_imported(tmp_path, client, admin_user, name):
    client.force_login(admin_user)
    page = client.get(reverse("annotate:import-list")).content.decode()
    assert f'<option value="{name}"' in page and escape(importing.FORMATS[name].help) in page
    assert name in option_choices(import_pool.Command, "format")
    assert name in serializers.ImportRequestSerializer().fields["format"].choices
    assert importing.detect_format(SAMPLE_LINES[name]) == name
    summary = importing.import_pool(project=Project.objects.sole(), path=write(tmp_path, [SAMPLE_LINES[name]]))
    assert (summary.format, summary.created, summary.errors) == (name, 1, 0)


def test_the_command_prints_a_summary_and_fails_when_a_line_fails(tmp_path, capsys):
    good = write(tmp_path, [generic(1)], "good.jsonl")
    call_command("import_pool", str(good), "--source", "cli", "--report", str(tmp_path / "r.jsonl"))
    out = capsys.readouterr().out
    assert "1 lines, 1 created, 0 duplicates, 0 errors" in out
    assert Solution.objects.get().source == "cli"
    bad = write(tmp_path, [generic(2), "nope"], "bad.jsonl")
    with pytest.raises(CommandError, match="1 line"):
        call_command("import_pool", str(bad), "--format", "generic", "--atomic")
    assert "line 2: field 'line': is not valid JSON" in capsys.readouterr().err
    assert Solution.objects.count() == 1


def test_the_command_queues_what_it_imported_unless_told_not_to(tmp_path, capsys):
    from annotate.models import QueueItem

    call_command("import_pool", str(write(tmp_path, [generic(1), generic(2, ground_truth_answer="5")])))
    out = capsys.readouterr().out
    assert "new solutions graded 1 right, 1 wrong, 0 unknown" in out
    assert "2 solutions queued for labeling" in out
    assert QueueItem.objects.values("solution_id").distinct().count() == 2
    call_command("import_pool", str(write(tmp_path, [generic(3)], "later.jsonl")), "--no-queue")
    assert "queued" not in capsys.readouterr().out
    assert QueueItem.objects.values("solution_id").distinct().count() == 2


@pytest.mark.postgresql  # SQLite stores NUL characters; PostgreSQL text cannot
def test_a_line_the_database_rejects_is_reported_and_the_rest_of_its_batch_imports(tmp_path):
    report_path = tmp_path / "r.jsonl"
    lines = [generic(1), generic(2, problem="What is 2 + 2?\u0000"), generic(3)]
    summary = importing.import_pool(project=Project.objects.sole(),
                                    path=write(tmp_path, lines), report_path=report_path)
    statuses = [(e["status"], (e["error"] or "")[:26]) for e in read_report(report_path)]
    assert statuses == [("created", ""), ("error", "rejected by the database: "), ("created", "")]
    assert summary.created == 2 and Solution.objects.count() == 2


# --- import jobs: one lifecycle ----------------------------------------------------------


def import_job(tmp_path: Path, lines: list, **fields) -> ImportJob:
    path = write(tmp_path, lines)
    return ImportJob.objects.create(path=str(path), report_path=str(tmp_path / "report.jsonl"), **fields)


@pytest.mark.parametrize(("atomic", "state"), [(False, JobState.SUCCEEDED), (True, JobState.FAILED)])
def test_a_redelivered_task_for_a_finished_import_does_nothing(tmp_path, atomic, state):
    job = import_job(tmp_path, [generic(1), generic(2), "nope"], atomic=atomic)
    import_pool_task(job.pk)
    job.refresh_from_db()
    assert job.state == state
    before = ImportJob.objects.values().get(pk=job.pk), Solution.objects.count(), Path(job.report_path).read_bytes()
    with open(job.path, "a") as handle:  # what a second run would import
        handle.write(json.dumps(generic(3)) + "\n")
    import_pool_task(job.pk)
    after = ImportJob.objects.values().get(pk=job.pk), Solution.objects.count(), Path(job.report_path).read_bytes()
    assert after == before


def test_an_import_left_running_by_a_dead_attempt_is_resumed(tmp_path):
    job = import_job(tmp_path, [generic(1), generic(2), generic(3)])
    # What the dead attempt got done before it died: two lines written, the job running.
    importing.import_pool(project=Project.objects.sole(),
                          path=write(tmp_path, [generic(1), generic(2)], "first-two.jsonl"))
    ImportJob.objects.filter(pk=job.pk).update(state=JobState.RUNNING, done=2, total=3, created=2)
    assert import_pool_task(job.pk) == 1
    job.refresh_from_db()
    assert (job.state, job.done, job.total, job.created, job.duplicates, job.errors) == (
        JobState.SUCCEEDED, 3, 3, 1, 2, 0)
    assert job.finished_at is not None and Solution.objects.count() == 3


@pytest.mark.parametrize("broken", ["the file", "the report folder"])
def test_an_exception_anywhere_in_the_import_ends_the_job_failed_with_its_message(tmp_path, broken):
    job = import_job(tmp_path, [generic(1)])
    if broken == "the file":
        Path(job.path).unlink()
        expected = FileNotFoundError
    else:
        (tmp_path / "taken").write_text("a file where the report's folder should be")
        ImportJob.objects.filter(pk=job.pk).update(report_path=str(tmp_path / "taken" / "report.jsonl"))
        expected = (FileExistsError, NotADirectoryError)
    with pytest.raises(expected):
        import_pool_task(job.pk)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.finished_at is not None
    assert job.error.split(":")[0] in ("FileNotFoundError", "FileExistsError", "NotADirectoryError")
    assert str(tmp_path) in job.error
    # Failed is final: a redelivery leaves it alone, even once the cause is gone.
    write(tmp_path, [generic(1)])
    ImportJob.objects.filter(pk=job.pk).update(report_path=str(tmp_path / "report.jsonl"))
    import_pool_task(job.pk)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and not Solution.objects.exists()


def test_once_the_grading_budget_is_spent_the_rest_of_the_import_is_imported_ungraded_with_a_note(
    tmp_path, monkeypatch, settings
):
    """Every answer here takes 0.4 s to grade, as hostile ones take the whole timeout: a 1 s budget
    grades the first lines (the last of them with only what is left) and leaves the rest unknown."""
    from annotate.pool.importing import writing

    settings.STEPWISE_IMPORT_GRADING_BUDGET = 1.0
    timeouts = []

    def slow_judge(*, answer, truth, timeout=None):
        timeouts.append(timeout)
        time.sleep(0.4)
        return judge(answer=answer, truth=truth)

    monkeypatch.setattr(writing, "judge", slow_judge)
    job = importing.create_import_job(project=Project.objects.sole(),
                                      path=write(tmp_path, [generic(n) for n in range(1, 9)]))
    started = time.monotonic()
    importing.run_import_job(job_id=job.pk)
    assert time.monotonic() - started < 8 * 0.4  # not every line was graded
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.error
    report = read_report(Path(job.report_path))
    graded = [entry for entry in report if entry["is_correct"] is not None]
    assert 2 <= len(graded) <= 4 and graded == report[: len(graded)]
    assert all(entry["is_correct"] is True and entry["note"] is None for entry in graded)
    note = "not graded: the import's grading budget (1 s, STEPWISE_IMPORT_GRADING_BUDGET) was spent"
    ungraded = report[len(graded):]
    assert [(e["status"], e["is_correct"], e["note"]) for e in ungraded] == [("created", None, note)] * len(ungraded)
    assert Solution.objects.get(pk=ungraded[0]["solution"]).grading_note == note
    assert (job.created, job.errors, job.graded_right, job.graded_unknown) == (8, 0, len(graded), len(ungraded))
    # Each line may take no more than what is left (here less than STEPWISE_GRADING_TIMEOUT).
    assert len(timeouts) == len(graded) and timeouts[0] == 1.0 and 0 < timeouts[-1] < 0.4
    assert timeouts == sorted(timeouts, reverse=True)


@pytest.mark.postgresql
def test_a_large_import_renews_the_planners_statistics_of_the_pool_as_it_grows(tmp_path):
    from django.db import connection

    def planned_rows(table: str) -> float:
        with connection.cursor() as cursor:
            cursor.execute("SELECT reltuples FROM pg_class WHERE relname = %s", [table])
            return cursor.fetchone()[0]

    # Inside one transaction (the test's), as an atomic import is: autovacuum could not see these rows.
    importing.import_pool(project=Project.objects.sole(), path=write(tmp_path, [generic(n) for n in range(2500)]),
                          grading_budget=0)
    assert planned_rows("annotate_solution") >= 2000 and planned_rows("annotate_step") >= 4000
