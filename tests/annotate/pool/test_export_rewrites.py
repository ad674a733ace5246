"""A rewritten step, labeled the phase-1 way and read by every consumer of labels.

With written corrections on and stop-at-first-error off, an annotator rates a step -1, writes
the step as it should be (a human completion) and goes on rating the steps after it. The one
rule (`annotate.labeling.verdicts`' docstring) says what each consumer gets, and these tests
read the files with the consumers' own readers: the PRM800K schema validator, TRL's converter
and tokenizer (trl 1.13's own, through `trl_reference`), `datasets` for Parquet.
"""
import json

import pytest

from annotate.labeling import actions as labeling
from annotate.labeling import quality, queueing, reviewing, verdicts
from annotate.models import Annotation, LabelingConfig, Project, StepLabel
from annotate.pool import exporting, prm800k
from annotate.pool.exporting import ExportOptions
from bench.tiny import build_tiny_tokenizer
from scoring.rescoring import label_rows
from tests.annotate.pool.trl_reference import supervised_labels, tokenize_row, trl_converter_rows
from tests.annotations import without_assistance
from tests.factories import SolutionFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

STEPS = ["Let x = 2.", "Then 2x = 5.", "So 2x + 1 = 5.", "# Answer\n\n5"]
REWRITE = "Then 2x = 4."


def rows(format: str, **options) -> list[dict]:
    return list(exporting.iter_rows(project=Project.objects.sole(), format=format, options=ExportOptions(**options)))


@pytest.fixture
def phase1_config():
    config = LabelingConfig.of(Project.objects.sole())
    config.allow_human_completion, config.stop_at_first_error = True, False
    config.save()
    return config


def label(annotator, ratings: list[int], rewrites: dict[int, str], *, is_correct: bool = False) -> Annotation:
    """Claim a task of STEPS and label it through the labeling functions: rate each step in turn,
    rewrite the -1 steps named in `rewrites` right after rating them, submit."""
    SolutionFactory(steps=STEPS, is_correct=is_correct)
    queueing.ensure_default_queue(Project.objects.sole())
    task = queueing.claim_next(annotator=annotator, project=Project.objects.sole())
    for index, rating in enumerate(ratings):
        labeling.rate(annotation=task, index=index, rating=rating)
        if index in rewrites:
            labeling.write_completion(annotation=task, index=index, text=rewrites[index])
    labeling.submit(annotation=task)
    return Annotation.objects.get(pk=task.pk)


def test_a_rewritten_step_is_not_chosen_and_the_steps_after_it_are(annotator, phase1_config):
    task = label(annotator, [1, -1, 1, 1], {1: REWRITE})
    assert task.finish_reason == "found_error"  # the pool's solution has an error at step 2
    (line,) = rows("prm800k")
    prm800k.parse_line(json.loads(json.dumps(line)), 1)  # the schema's own validator
    steps = line["label"]["steps"]
    assert [step["chosen_completion"] for step in steps] == [0, None, 0, 0]
    assert [[(c["text"], c["rating"]) for c in step["completions"]] for step in steps] == [
        [(text, rating)] for text, rating in zip(STEPS, [1, -1, 1, 1])]
    assert steps[1]["human_completion"]["text"] == REWRITE
    assert [step["human_completion"] for step in (steps[0], *steps[2:])] == [None] * 3
    # PRM800K's own reading of the trajectory (its README): the rewrite, not the rejected text.
    trajectory = [step["human_completion"]["text"] if step["chosen_completion"] is None
                  else step["completions"][step["chosen_completion"]]["text"] for step in steps]
    assert trajectory == [STEPS[0], REWRITE, *STEPS[2:]]


def test_trl_rows_end_the_rejected_step_false_and_go_on_with_the_rewrite_true(annotator, phase1_config):
    task = label(annotator, [1, -1, 1, 1], {1: REWRITE})
    prompt = task.solution.problem.statement
    expected = [
        {"prompt": prompt, "completions": STEPS[:2], "labels": [True, False]},
        {"prompt": prompt, "completions": [STEPS[0], REWRITE, *STEPS[2:]], "labels": [True] * 4},
    ]
    # Two rows for one task with one rewrite that ends on a good step.
    assert without_assistance(rows("trl")) == expected
    # The same rows as TRL's own converter makes of the PRM800K line.
    assert without_assistance(rows("trl", neutral_is_good=False)) == trl_converter_rows(rows("prm800k")[0])
    # And what PRMTrainer learns from each row: one label per step, on its last token.
    tokenizer = build_tiny_tokenizer()
    assert [supervised_labels(tokenize_row(row, tokenizer)) for row in expected] == [row["labels"] for row in expected]


def test_trl_parquet_holds_the_same_rows(annotator, phase1_config, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    import datasets

    label(annotator, [1, -1, 1, 1], {1: REWRITE})
    out = tmp_path / "trl"
    exporting.write_export(project=Project.objects.sole(),
                           path=out, format="trl", options=ExportOptions(container="parquet"))
    table = datasets.load_dataset("parquet", data_files=str(out / "data" / "train.parquet"), split="train")
    assert table.to_list() == rows("trl")
    assert "rewrite is True in the path" in (out / "README.md").read_text()


def test_readers_of_the_pool_steps_see_the_minus_one_at_the_rewritten_step(annotator, phase1_config, reviewer):
    task = label(annotator, [1, -1, 1, 1], {1: REWRITE})
    (bench,) = rows("processbench")
    assert (bench["steps"], bench["label"]) == (STEPS, 1)
    (soft,) = rows("soft")
    assert (soft["k"], soft["n"]) == ([1, 0, 0, 0], [1, 1, 0, 0])
    (row,) = label_rows.gather_rows(solution_ids=[task.solution_id])
    assert row.ratings == ((1, -1, None, None),)  # training: nothing after the first error
    assert quality.ratings_of([task.pk]) == {task.pk: [1, -1, 1, 1]}
    review = reviewing.review_rows(annotation=task, others=[])
    assert [(r.ratings, r.cells[0].written_instead) for r in review] == [
        ([1], None), ([-1], REWRITE), ([1], None), ([1], None)]
    verdict = verdicts.verdicts(task)
    assert verdict.ratings == (1, 1, 1, 1) and verdict.first_error == 1


def test_a_task_ending_at_an_error_after_a_rewrite_leaves_that_step_unchosen(annotator, phase1_config):
    task = label(annotator, [1, -1, 1, -1], {1: REWRITE})
    (line,) = rows("prm800k")
    assert [step["chosen_completion"] for step in line["label"]["steps"]] == [0, None, 0, None]
    prompt = task.solution.problem.statement
    path = [STEPS[0], REWRITE, STEPS[2]]
    # A row per rated text not gone on from (the rewritten step's, the step stopped at), and the path.
    assert without_assistance(rows("trl")) == [
        {"prompt": prompt, "completions": STEPS[:2], "labels": [True, False]},
        {"prompt": prompt, "completions": [*path, STEPS[3]], "labels": [True, True, True, False]},
        {"prompt": prompt, "completions": path, "labels": [True, True, True]},
    ] == trl_converter_rows(line)


def test_two_rewrites_give_a_row_each_and_the_path(annotator, phase1_config):
    task = label(annotator, [1, -1, -1, 1], {1: REWRITE, 2: "So 2x + 1 = 5 is wrong: 2x + 1 = 5."})
    assert [label.chosen_completion for label in StepLabel.objects.filter(annotation=task).order_by("index")] == [
        0, None, None, 0]
    assert [row["labels"] for row in rows("trl")] == [[True, False], [True, True, False], [True, True, True, True]]


def test_without_a_rewrite_the_steps_after_an_error_are_chosen_as_before(annotator, phase1_config):
    task = label(annotator, [1, -1, 1, 1], {})
    chosen = list(StepLabel.objects.filter(annotation=task).order_by("index").values_list("chosen_completion",
                                                                                         flat=True))
    assert chosen == [0, 0, 0, 0]  # the annotator went on from the step they rated -1
    assert [row["labels"] for row in rows("trl")] == [[True, False]]  # a path ends at its first error
