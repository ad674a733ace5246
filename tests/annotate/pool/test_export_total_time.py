"""PRM800K's `total_time` is always a whole number of milliseconds for a task labeled here: the
active time the page measured, else (an API client reports none) the time from claim to submit.
The export's report and dataset card say how many lines have each; every line passes the schema."""
import importlib
import json

import pytest
from django.apps import apps

from annotate.labeling import actions as labeling
from annotate.labeling import queueing
from annotate.labeling.actions import ActiveTime
from annotate.models import Annotation, Completion, ExportJob, Project, StepLabel
from annotate.pool import exporting, prm800k
from annotate.pool.exporting import ExportOptions, ExportTally
from tests.annotations import PHASE2_LINE, import_lines
from tests.factories import SolutionFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def labeled(annotator, *, page: bool) -> Annotation:
    """A task labeled through the labeling functions: by the page (times reported) or an API client (none)."""
    SolutionFactory(steps=["One.", "Two.", "# Answer\n\n2"])
    queueing.ensure_default_queue(Project.objects.sole())
    task = queueing.claim_next(annotator=annotator, project=Project.objects.sole())
    for index in range(3):
        labeling.rate(annotation=task, index=index, rating=1,
                      times=ActiveTime(total_ms=700 * (index + 1), steps={index: 700}) if page else None)
    labeling.submit(annotation=task, times=ActiveTime(total_ms=2500) if page else None)
    return Annotation.objects.get(pk=task.pk)


def test_every_prm800k_line_has_a_whole_total_time_and_passes_the_schema(annotator, tmp_path):
    from_api, from_page = labeled(annotator, page=False), labeled(annotator, page=True)
    import_lines(tmp_path, [PHASE2_LINE])
    assert from_api.total_time_ms is None and from_page.total_time_ms == 2500
    tally = ExportTally()
    lines = [json.loads(line) for line in exporting.iter_jsonl(project=Project.objects.sole(),
                                                               format="prm800k", options=ExportOptions(), tally=tally)]
    for number, line in enumerate(lines, 1):
        parsed = prm800k.parse_line(line, number)
        assert type(line["label"]["total_time"]) is int and parsed.total_time_ms == line["label"]["total_time"]
    api_line, page_line, imported_line = lines  # in annotation order
    claim_to_submit = (from_api.timestamp - from_api.created_at).total_seconds() * 1000
    assert abs(api_line["label"]["total_time"] - claim_to_submit) <= 1
    assert page_line["label"]["total_time"] == 2500
    assert imported_line == PHASE2_LINE  # an imported line is written back as it was read
    assert dict(tally.total_time) == {"claim_to_submit": 1, "active": 1, "imported": 1}
    assert prm800k.total_time(from_page) == (2500, "active")


def test_an_imported_line_without_a_time_keeps_its_null(tmp_path):
    import_lines(tmp_path, [{**PHASE2_LINE, "label": {**PHASE2_LINE["label"], "total_time": None}}])
    (line,) = exporting.iter_rows(project=Project.objects.sole(), format="prm800k", options=ExportOptions())
    assert line["label"]["total_time"] is None


def test_the_export_job_and_the_dataset_card_say_where_total_time_came_from(annotator, admin_user, tmp_path):
    labeled(annotator, page=False)
    job = ExportJob.objects.create(format="prm800k", options=ExportOptions().to_dict(), created_by=admin_user)
    job = exporting.run_export_job(job_id=job.pk)
    assert job.report == {"total_time": {"claim_to_submit": 1}}
    assert ExportJob.objects.get(pk=job.pk).report == job.report
    out = tmp_path / "prm800k"
    exporting.write_export(project=Project.objects.sole(),
                           path=out, format="prm800k", options=ExportOptions(container="parquet"))
    assert "- `total_time`: 1 no time reported: from the claim to the submit" in (out / "README.md").read_text()


def test_the_migration_repairs_rewritten_steps_submitted_as_chosen(annotator):
    """Migration 0014: a rewritten step stored chosen (the old submit) is not; a found_error task's
    last step, rated good, is chosen; an imported line is left as it was read."""
    task = labeled(annotator, page=False)
    Annotation.objects.filter(pk=task.pk).update(finish_reason="found_error")
    Completion.objects.filter(step_label__annotation=task, step_label__index=1).update(rating=-1)
    StepLabel.objects.filter(annotation=task, index=1).update(human_completion={"text": "Two, rewritten."})
    StepLabel.objects.filter(annotation=task, index=2).update(chosen_completion=None)
    imported = Annotation.objects.create(solution=task.solution, labeler="imported", status="submitted")
    StepLabel.objects.create(annotation=imported, index=0, chosen_completion=0, human_completion={"text": "x"})
    migration = importlib.import_module("annotate.migrations.0014_chosen_completion_after_rewrites")
    migration.repair(apps, None)
    chosen = StepLabel.objects.filter(annotation=task).order_by("index").values_list("chosen_completion", flat=True)
    assert list(chosen) == [0, None, 0]
    assert StepLabel.objects.get(annotation=imported).chosen_completion == 0
