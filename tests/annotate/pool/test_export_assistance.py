"""What the annotator saw of the model goes out with every export format, so a dataset can be
filtered by it: TRL, ProcessBench and soft rows carry `assistance`, PRM800K each step's record."""
import json

import pytest
from django.core.management import call_command

from annotate.labeling import actions as labeling
from annotate.labeling import queueing
from annotate.models import LabelingConfig, Project
from annotate.pool import exporting
from annotate.pool.exporting.options import ExportOptions
from tests.factories import SolutionFactory, scored_by_current_model

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]
ASKED = {"mode": "second_look", "second_look": True}
BLIND = {"mode": "blind", "second_look": False}


def _mode(assistance: str) -> None:
    LabelingConfig.objects.update_or_create(
        project=Project.objects.sole(), defaults={"assistance": assistance, "assistance_margin": 0.5})


def _labeled(annotator, *, assistance: str, ratings: list[int]) -> int:
    """A wrong-answer solution whose model doubts step 2, labeled under `assistance`; its id."""
    _mode(assistance)
    solution = SolutionFactory(steps=["one", "two", "three"], is_correct=False)
    scored_by_current_model(solution, [0.9, 0.1, 0.8])
    queueing.ensure_default_queue(Project.objects.sole())
    task = queueing.claim_next(annotator=annotator, project=Project.objects.sole())
    assert task.solution_id == solution.pk
    for index, rating in enumerate(ratings):
        labeling.rate(annotation=task, index=index, rating=rating)
    labeling.rate(annotation=task, index=1, rating=-1)  # under second_look: the answer to "look again?"
    labeling.submit(annotation=task)
    return solution.pk


def _rows(format: str) -> list[dict]:
    return list(exporting.iter_rows(project=Project.objects.sole(), format=format, options=ExportOptions()))


@pytest.mark.parametrize("format", ["trl", "processbench", "soft"])
def test_an_annotation_made_under_second_look_exports_what_its_annotator_saw(annotator, format):
    _labeled(annotator, assistance="second_look", ratings=[1, 1])  # +1 against p = 0.1: asked
    rows = _rows(format)
    assert rows and all(row["assistance"] == ASKED for row in rows)


def test_prm800k_keeps_each_steps_first_and_final_answer(annotator):
    _labeled(annotator, assistance="second_look", ratings=[1, 1])
    (line,) = _rows("prm800k")
    assert [step["assistance"]["shown"] for step in line["label"]["steps"]] == ["none", "second_look"]
    assert line["label"]["steps"][1]["assistance"] == {
        "mode": "second_look", "model_p": 0.1, "shown": "second_look", "first_rating": 1, "final_rating": -1}


def test_a_second_look_project_where_the_model_agreed_says_no_prompt_was_shown(annotator):
    _labeled(annotator, assistance="second_look", ratings=[1])  # then -1 against p = 0.1: agreed
    rows = _rows("trl")
    assert rows and all(row["assistance"] == {"mode": "second_look", "second_look": False} for row in rows)


@pytest.mark.parametrize("format", ["trl", "processbench", "soft"])
def test_an_exported_file_can_be_filtered_by_what_the_annotators_saw(annotator, tmp_path, format):
    blind = _labeled(annotator, assistance="blind", ratings=[1])
    asked = _labeled(annotator, assistance="second_look", ratings=[1, 1])
    out = tmp_path / f"{format}.jsonl"
    call_command("export_prm800k", str(out), "--format", format)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    by_mode = {mode: [row for row in rows if row["assistance"]["mode"] == mode] for mode in ("blind", "second_look")}
    assert by_mode["blind"] and by_mode["second_look"]
    assert len(rows) == len(by_mode["blind"]) + len(by_mode["second_look"])
    assert all(row["assistance"] == BLIND for row in by_mode["blind"])
    assert all(row["assistance"] == ASKED for row in by_mode["second_look"])
    if format != "trl":  # per-solution rows name their solution
        ids = {mode: {str(row["id"]).rsplit("-", 1)[-1] for row in found} for mode, found in by_mode.items()}
        assert ids == {"blind": {str(blind)}, "second_look": {str(asked)}}
