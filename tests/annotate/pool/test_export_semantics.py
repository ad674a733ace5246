"""Exports read by their consumers: TRL's PRM800K converter and `datasets` schema, ProcessBench's
fields and label semantics, and the text that carries each verdict.

TRL's reference here is its own converter (trl 1.13, `examples/datasets/prm800k.py`), restated
in `tests/annotate/pool/trl_reference.py` as `trl_converter_rows`: every completion of a step that
was not continued gives a row (the path so far plus it, labeled `rating == 1`), the path goes
on with the chosen or human completion (a human one is good), and the walked path is the last
row.
"""
import json

import pytest
from django.core.management import call_command

from annotate.labeling import actions as labeling
from annotate.labeling import queueing, reviewing, verdicts
from annotate.models import Annotation, ExportJob, LabelingConfig, Project, StepLabel
from annotate.pool import exporting
from annotate.pool.exporting import ExportOptions, ExportTally
from scoring.rescoring import label_rows
from tests.annotate.pool.trl_reference import trl_converter_rows
from tests.annotations import BLIND, PHASE1_LINE, PHASE2_LINE, annotate, import_lines, without_assistance
from tests.conftest import TEST_DATA
from tests.factories import SolutionFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

PROCESSBENCH_FIELDS = ["id", "generator", "problem", "steps", "final_answer_correct", "label"]


def rows(format: str, tally: ExportTally | None = None, **options) -> list[dict]:
    return list(exporting.iter_rows(project=Project.objects.sole(),
                                    format=format, options=ExportOptions(**options), tally=tally))


@pytest.fixture
def rewrite_config():
    config = LabelingConfig.of(Project.objects.sole())
    config.allow_human_completion = True
    config.save()
    return config


def label_with_a_rewrite(annotator, steps: list[str], *, wrong: int, rewrite: str) -> Annotation:
    """The real labeling flow: rate steps +1 up to `wrong`, rate it -1, write the step instead, submit."""
    SolutionFactory(steps=steps, is_correct=False)
    queueing.ensure_default_queue(Project.objects.sole())
    task = queueing.claim_next(annotator=annotator, project=Project.objects.sole())
    for index in range(wrong):
        labeling.rate(annotation=task, index=index, rating=1)
    labeling.rate(annotation=task, index=wrong, rating=-1)
    labeling.write_completion(annotation=task, index=wrong, text=rewrite)
    assert labeling.submit(annotation=task) == "found_error"
    return task


# --- TRL --------------------------------------------------------------------------------------


def test_trl_rows_with_neutral_bad_are_exactly_the_rows_trls_converter_writes(tmp_path):
    import_lines(tmp_path, [PHASE1_LINE, PHASE2_LINE])
    expected = trl_converter_rows(PHASE1_LINE) + trl_converter_rows(PHASE2_LINE)
    exported = rows("trl", neutral_is_good=False)
    assert without_assistance(exported) == expected and all(row["assistance"] == BLIND for row in exported)
    # Phase 1's rejected alternatives are rows too: a negative label at each.
    assert {"prompt": PHASE1_LINE["question"]["problem"], "completions": ["The denominator factors as $(x-3)(x+2)$."],
            "labels": [False]} in expected


def test_trl_neutral_good_differs_from_the_converter_only_where_a_step_is_rated_zero(tmp_path):
    import_lines(tmp_path, [PHASE2_LINE])
    strict, lenient = rows("trl", neutral_is_good=False), rows("trl")
    assert [row["completions"] for row in strict] == [row["completions"] for row in lenient]
    assert [row["labels"] for row in strict] == [[True, False, False], [True, False]]
    assert [row["labels"] for row in lenient] == [[True, True, False], [True, True]]


def test_a_rewritten_step_exports_its_minus_one_with_the_pool_text_and_the_plus_one_with_the_rewrite(
    annotator, rewrite_config
):
    steps = ["Let x = 2.", "Then 2x = 5.", "So the answer is 5."]
    task = label_with_a_rewrite(annotator, steps, wrong=1, rewrite="Then 2x = 4.")
    problem = task.solution.problem.statement
    assert without_assistance(rows("trl")) == [
        {"prompt": problem, "completions": ["Let x = 2.", "Then 2x = 5."], "labels": [True, False]},
        {"prompt": problem, "completions": ["Let x = 2.", "Then 2x = 4."], "labels": [True, True]},
    ]
    # Readers of the pool's own steps see the -1 at the step the annotator rewrote.
    (bench,) = rows("processbench")
    assert (bench["steps"], bench["label"]) == (steps, 1)
    (soft,) = rows("soft")
    assert (soft["k"], soft["n"]) == ([1, 0, 0], [1, 1, 0])

    (row,) = label_rows.gather_rows(solution_ids=[task.solution_id])
    assert row.steps == tuple(steps) and row.ratings == ((1, -1, None),)


def test_trl_file_loads_with_datasets_as_prmtrainer_reads_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    import datasets

    import_lines(tmp_path, [PHASE1_LINE, PHASE2_LINE])
    out = tmp_path / "trl.jsonl"
    call_command("export_prm800k", str(out), "--format", "trl", "--neutral", "bad")
    table = datasets.load_dataset("json", data_files=str(out), split="train")
    assert table.column_names == ["prompt", "completions", "labels", "assistance"]  # PRMTrainer drops the last
    assert table.features["prompt"] == datasets.Value("string")
    assert table.features["completions"].feature == datasets.Value("string")
    assert table.features["labels"].feature == datasets.Value("bool")
    assert without_assistance(table.to_list()) == trl_converter_rows(PHASE1_LINE) + trl_converter_rows(PHASE2_LINE)


# --- ProcessBench -----------------------------------------------------------------------------


def test_processbench_file_has_processbench_fields_and_types(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    import datasets

    annotate(SolutionFactory(steps=["a", "b", "c"], is_correct=False, generator="Qwen2.5-Math-7B"), [1, -1])
    annotate(SolutionFactory(steps=["d", "e"], is_correct=True, generator=""), [1, 1])
    out = tmp_path / "pb.jsonl"
    call_command("export_prm800k", str(out), "--format", "processbench")
    table = datasets.load_dataset("json", data_files=str(out), split="train")
    assert table.column_names == PROCESSBENCH_FIELDS + ["assistance"]  # what the annotators saw, for filtering
    string = datasets.Value("string")
    assert [table.features[name] for name in ("id", "generator", "problem")] == [string] * 3
    assert table.features["steps"].feature == string
    assert table.features["final_answer_correct"] == datasets.Value("bool")
    assert table.features["label"] == datasets.Value("int64")
    assert table["label"] == [1, -1] and table["final_answer_correct"] == [False, True]
    assert table["generator"][0] == "Qwen2.5-Math-7B" and table["generator"][1]  # never null


def test_processbench_leaves_out_give_up_bad_problem_and_unknown_grades_and_counts_them():
    annotate(SolutionFactory(steps=["a", "b", "c"]), [1, 1], finish_reason="give_up")
    annotate(SolutionFactory(steps=["a", "b"]), [1], finish_reason="bad_problem")
    annotate(SolutionFactory(steps=["a", "b"], is_correct=None), [1, 1])
    kept = annotate(SolutionFactory(steps=["p", "q"], is_correct=False), [1, -1])
    tally = ExportTally()
    (row,) = rows("processbench", tally)
    assert row["id"].endswith(f"-{kept.solution_id}") and row["label"] == 1
    assert (tally.read, dict(tally.skipped)) == (4, {"give_up": 1, "bad_problem": 1, "unknown_grade": 1})


def test_processbench_leaves_out_labels_the_grade_contradicts_and_counts_them(admin_user):
    solution = SolutionFactory(steps=["a", "b"], is_correct=False)
    annotate(solution, [1, 1], labeler="x")  # every step good, yet the answer grades as wrong
    tally = ExportTally()
    assert rows("processbench", tally) == [] and tally.skipped == {"answer_contradicts_labels": 1}
    job = ExportJob.objects.create(format="processbench", options=ExportOptions().to_dict(), created_by=admin_user)
    assert exporting.run_export_job(job_id=job.pk).skipped == {"answer_contradicts_labels": 1}
    assert len(rows("soft")) == len(rows("trl")) == 1  # the other formats keep the labels
    annotate(solution, [1, -1], labeler="y")  # another annotator found the error: theirs decides
    assert [row["label"] for row in rows("processbench")] == [1]


def test_processbench_writes_one_row_per_solution_when_its_annotators_agree():
    solution = SolutionFactory(steps=["a", "b", "c"], is_correct=False)
    annotate(solution, [1, 0, -1], labeler="x")
    annotate(solution, [1, 1, -1], labeler="y")
    annotate(solution, [1, 1], labeler="z", finish_reason="give_up")
    (row,) = rows("processbench")
    assert row["label"] == 2 and row["id"] == f"tests-{solution.pk}"


def test_processbench_leaves_out_a_disagreement_until_a_reviewer_decides_it(reviewer):
    solution = SolutionFactory(steps=["a", "b", "c"], is_correct=False)
    first = annotate(solution, [1, -1], labeler="x")
    annotate(solution, [1, 1, -1], labeler="y")
    tally = ExportTally()
    assert rows("processbench", tally) == [] and tally.skipped["disagreement"] == 1
    # The reviewer confirms x's -1 at step 2 (an override to the same value is a decision too).
    reviewing.override_rating(annotation=first, index=1, rating=-1, reviewer=reviewer, note="checked")
    assert [row["label"] for row in rows("processbench")] == [1]


def test_processbench_label_ignores_a_rating_past_an_unrated_step():
    from annotate.models import Completion

    annotation = annotate(SolutionFactory(steps=["a", "b", "c"]), [1, 1, 1])
    Completion.objects.filter(step_label__annotation=annotation, step_label__index=1).update(rating=None)
    tally = ExportTally()
    assert rows("processbench", tally) == [] and tally.skipped == {"undecided": 1}


def test_processbench_generator_comes_from_the_imported_provenance(tmp_path):
    from annotate.pool import importing

    path = tmp_path / "generic.jsonl"
    path.write_text(json.dumps({"problem": "1+1?", "ground_truth_answer": "2", "generator": "Qwen2.5-Math-1.5B",
                                "steps": ["1+1 = 2.", "# Answer\n\n2"]}) + "\n")
    importing.import_pool(project=Project.objects.sole(), path=path, format="generic")
    annotation = annotate(Annotation.solution.field.related_model.objects.get(), [1, 1])
    (row,) = rows("processbench")
    assert (row["generator"], row["final_answer_correct"], row["label"]) == ("Qwen2.5-Math-1.5B", True, -1)
    assert row["steps"] == ["1+1 = 2.", "# Answer\n\n2"] and annotation.finish_reason == "solution"


# --- inconsistent states are never exported ---------------------------------------------------


def test_an_annotation_whose_finish_reason_its_ratings_contradict_is_never_exported(settings, admin_user):
    annotation = annotate(SolutionFactory(steps=["a", "b", "c"]), [1, -1])
    from annotate.models import Completion

    # found_error with no -1 step (as an old override could leave it).
    Completion.objects.filter(step_label__annotation=annotation, step_label__index=1).update(rating=0)
    assert verdicts.verdicts(annotation).contradiction("found_error")
    for format in ("trl", "processbench", "soft"):
        tally = ExportTally()
        assert rows(format, tally) == [] and tally.skipped == {"inconsistent": 1}, format
    job = ExportJob.objects.create(format="processbench", options=ExportOptions().to_dict(), created_by=admin_user)
    job = exporting.run_export_job(job_id=job.pk)
    assert (job.lines, job.done, job.total, job.skipped) == (0, 1, 1, {"inconsistent": 1})


def test_the_export_page_shows_what_was_left_out(client, admin_user):
    annotate(SolutionFactory(steps=["a", "b"]), [1], finish_reason="give_up")
    job = ExportJob.objects.create(format="processbench", options=ExportOptions().to_dict(), created_by=admin_user)
    exporting.run_export_job(job_id=job.pk)
    client.force_login(admin_user)
    page = client.get(f"/jobs/export/{job.pk}/").content.decode()
    assert "Left out" in page and "give_up" in page and "1 of 1 solutions" in page


def test_a_human_step_label_stays_on_the_step_labels_not_the_pool_text(annotator, rewrite_config):
    task = label_with_a_rewrite(annotator, ["a", "b"], wrong=0, rewrite="A instead.")
    verdict = verdicts.verdicts(Annotation.objects.get(pk=task.pk))
    assert verdict.ratings == (1,) and verdict.steps[0].text == "A instead."
    assert verdict.pool_ratings == (-1, None) and verdict.pool_labels[0].written_instead == "A instead."
    assert StepLabel.objects.get(annotation=task).human_completion["text"] == "A instead."


# --- real model output ------------------------------------------------------------------------


REAL_RESPONSES = TEST_DATA / "model-responses" / "math_qwen25_cot_20x8.jsonl"


def test_real_qwen_responses_export_as_processbench_and_trl_read_them(tmp_path, monkeypatch):
    """Real Qwen2.5-Math responses (multi-line display math), imported with their generator,
    labeled, exported: every row has the pool's own steps, a boolean grade and a generator."""
    from annotate.models import Solution
    from annotate.pool import importing

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    import datasets

    lines = [json.loads(line) for line in REAL_RESPONSES.read_text().splitlines()[:3]]
    generic = tmp_path / "qwen.jsonl"
    generic.write_text("".join(
        json.dumps({"problem": line["question"], "ground_truth_answer": line["answer"], "solution": response,
                    "generator": "Qwen2.5-Math-7B-Instruct", "source": "qwen-math"}) + "\n"
        for line in lines for response in line["response"][:2]
    ))
    importing.import_pool(project=Project.objects.sole(), path=generic, format="generic")
    solutions = list(Solution.objects.order_by("pk"))
    assert len(solutions) >= 4
    for i, solution in enumerate(solutions):
        n = solution.steps.count()
        annotate(solution, [1] * n if i % 2 == 0 else [1] * (n // 2) + [-1])
    tally = ExportTally()
    expected = rows("processbench", tally)
    out = tmp_path / "pb.jsonl"
    call_command("export_prm800k", str(out), "--format", "processbench")
    table = datasets.load_dataset("json", data_files=str(out), split="train")
    # Every solution is a row, but those of unknown grade and those rated all good whose answer grades wrong.
    left_out = tally.skipped["unknown_grade"] + tally.skipped["answer_contradicts_labels"]
    assert table.to_list() == expected and len(expected) + left_out == len(solutions)
    assert table.features["final_answer_correct"] == datasets.Value("bool")
    assert set(table["generator"]) == {"Qwen2.5-Math-7B-Instruct"}
    by_id = {row["id"]: row for row in expected}
    for i, solution in enumerate(solutions):
        row = by_id.get(f"qwen-math-{solution.pk}")
        if row is None:
            continue
        assert row["steps"] == list(solution.steps.order_by("index").values_list("text", flat=True))
        assert row["label"] == (-1 if i % 2 == 0 else len(row["steps"]) // 2)
    assert any("\\[" in step for row in expected for step in row["steps"])  # real display math survives
    trl = tmp_path / "trl.jsonl"
    call_command("export_prm800k", str(trl), "--format", "trl", "--neutral", "bad")
    trl_table = datasets.load_dataset("json", data_files=str(trl), split="train")
    assert trl_table.features["labels"].feature == datasets.Value("bool") and trl_table.num_rows >= len(solutions)
