"""The README's pictures, made by the browser so they stay current (docs/screenshots/).

Real model output (Qwen2.5-Math responses from tests/data, imported by the import code) is
labeled in Chromium as an admin: the labeling screen mid-task, the "write the step as it should
be" box after a -1, and the home dashboard. The models page (held-out scores) and a training
run's loss curve are drawn from model versions and a run written here as the training code
stores them: no model is trained, so their numbers are illustrative. Each page is checked
before it is photographed, so a broken page fails the test instead of landing in the README.
A file is rewritten only when its bytes change.
"""
import datetime
import json
from pathlib import Path

import pytest
from django.utils import timezone

from annotate.labeling import queueing
from annotate.models import LabelingConfig, Project
from annotate.pool import importing
from jobs.states import JobState
from scoring.models import ModelVersion, TrainingRun
from scoring.store import registry
from tests.browser.test_labeling_browser import log_in, start_labeling, wait_rating
from tests.browser.test_model_output_flow import RESPONSES, assert_math_typeset, current_task
from tests.factories import user_with_role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(__file__).resolve().parent.parent.parent / "docs" / "screenshots"
VIEWPORT = {"width": 1280, "height": 800}
MAX_BYTES = 300_000
# (problem row, response) in the responses file: a wrong answer whose third step is its first
# error (a rectangle is s/4 wide, and s/2 - s/2 is not s/2), then a short correct one. Wrong
# answers are served first, so they come in this order.
PICKS = [(1, 3), (8, 0)]
WRONG_STEP = 2
REWRITE = ("Each vertical rectangle is half of a quarter of the block: width \\( \\frac{s}{4} \\) and height "
           "\\( \\frac{s}{2} \\), so its area is \\( \\frac{s^2}{8} \\).")
WHEN = timezone.make_aware(datetime.datetime(2025, 6, 2, 9, 30))


def save(page, name: str) -> None:
    """Photograph the page; write docs/screenshots/NAME.png only if its bytes changed."""
    png = page.screenshot(animations="disabled", caret="hide")
    assert len(png) < MAX_BYTES, f"{name}.png is {len(png)} bytes"
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    if not path.exists() or path.read_bytes() != png:
        path.write_bytes(png)


@pytest.fixture
def real_pool(transactional_db, tmp_path):
    rows = [json.loads(line) for line in RESPONSES.open()]
    path = tmp_path / "qwen.jsonl"
    path.write_text("".join(
        json.dumps({"problem": rows[row]["question"], "ground_truth_answer": rows[row]["answer"],
                    "solution": rows[row]["response"][response], "generator": "qwen2.5-math-7b-instruct"}) + "\n"
        for row, response in PICKS
    ))
    summary = importing.import_pool(path=path, format="generic")
    assert summary.created == len(PICKS)
    queueing.enqueue_imported(solution_ids=summary.solution_ids)
    # Written corrections on, every step rated (PRM800K phase 1).
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={
        "allow_human_completion": True, "stop_at_first_error": False})


@pytest.fixture
def admin_page(new_page, live_server):
    user_with_role("admin", "admin", is_staff=True)
    page = new_page()
    page.set_viewport_size(VIEWPORT)
    log_in(page, live_server, "admin")
    return page


def test_labeling_rewrite_and_dashboard_pictures(admin_page, live_server, real_pool):
    page = admin_page
    start_labeling(page, live_server)
    wrong = current_task(page)
    assert wrong.solution.is_correct is False
    assert_math_typeset(page, wrong)
    for index in range(WRONG_STEP):
        page.keyboard.press("3")
        wait_rating(page, index, 1)
    page.keyboard.press("1")
    wait_rating(page, WRONG_STEP, -1)
    page.keyboard.press("w")
    page.wait_for_function(f"() => document.activeElement?.id === 'human-{WRONG_STEP}'")
    page.keyboard.type(REWRITE)
    assert "write this step as it should be w" in page.inner_text(f"#step-{WRONG_STEP} form.human")
    page.evaluate("() => window.scrollTo(0, document.querySelector('#task-head').getBoundingClientRect().top"
                  " + window.scrollY - 16)")  # the steps, not the problem's diagram code
    save(page, "rewrite")

    page.keyboard.press("Control+Enter")
    page.locator(f"#step-{WRONG_STEP} form.human button", has_text="Update corrected step").wait_for()
    page.wait_for_function(f"() => document.activeElement?.id === 'step-{WRONG_STEP + 1}'")
    steps = wrong.solution.steps.count()
    for index in range(WRONG_STEP + 1, steps):
        page.keyboard.press("3")
        wait_rating(page, index, 1)
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: not url.endswith(f"/label/{wrong.pk}/"))
    wrong.refresh_from_db()
    assert (wrong.status, wrong.finish_reason) == ("submitted", "found_error")

    # The next task, a correct answer: two steps rated, the cursor on the third.
    page.locator("#step-0.cursor").wait_for()
    right = current_task(page)
    assert right.solution.is_correct is True
    assert_math_typeset(page, right)
    page.keyboard.press("3")
    wait_rating(page, 0, 1)
    page.keyboard.press("3")
    wait_rating(page, 1, 1)
    assert page.inner_text("#task-head .count").startswith("2 of ")
    page.evaluate("() => window.scrollTo(0, 0)")
    save(page, "labeling")

    page.goto(f"{live_server.url}/")
    assert "Welcome back, admin" in page.inner_text("h1")
    stats = page.inner_text(".stats")
    assert "1\nsolutions today" in stats and "1\nsolutions overall" in stats
    assert page.locator("button.big", has_text="Resume your task").count() == 1
    assert "Submitted labels" in page.inner_text("main")
    save(page, "dashboard")


def eval_metrics(auc: float, f1: float, best_of_8: float) -> dict:
    """Held-out metrics as eval_prm stores them (scoring/learning)."""
    return {"eval": {
        "step_auc": auc, "n_steps": 412, "n_solutions": 60, "mean_prob": 0.62, "positive_rate": 0.66,
        "processbench": {"f1": f1, "n_erroneous": 34, "n_correct": 26},
        "calibration": {"ece": 0.07},
        "best_of_n": {"by_n": {"8": {"problems": 20, "product": best_of_8, "majority": 0.7, "last": 0.65}}},
    }}


@pytest.fixture
def model_history(transactional_db):
    config = {"head": {"type": "point"}, "backbone": "HuggingFaceTB/SmolLM2-135M-Instruct"}
    base = ModelVersion.objects.create(
        name="smollm2-135m-g0", path="models/g0", weights_sha256="3f1c9a0b7e52d4c18a6f", config=config,
        status=ModelVersion.Status.PROMOTED)
    better = ModelVersion.objects.create(
        name="smollm2-135m-g1", path="models/g1", weights_sha256="a84e2d07c31b9f56e0d2", config=config,
        parent=base, status=ModelVersion.Status.PROMOTED,
        metrics=eval_metrics(0.781, 0.612, 0.75) | {"trained_on": {
            "solutions": 240, "step_labels": 1630, "labels": "human", "generation": 1, "head": "point",
            "mode": "lora", "backbone": "SmolLM2-135M-Instruct"}})
    registry.set_current_model(better, project=Project.objects.sole())
    ModelVersion.objects.create(
        name="smollm2-135m-g2", path="models/g2", weights_sha256="c0ffee5e1a2b3c4d5e6f", config=config,
        parent=better, status=ModelVersion.Status.REJECTED, metrics=eval_metrics(0.774, 0.598, 0.7))
    for days, version in enumerate(ModelVersion.objects.order_by("pk")):
        ModelVersion.objects.filter(pk=version.pk).update(created_at=WHEN + datetime.timedelta(days=days))
    curve = [{"epoch": epoch, "train_loss": round(0.69 * 0.8 ** epoch, 3),
              "val_loss": round(0.6 + 0.1 * 0.7 ** epoch, 3)} for epoch in range(1, 9)]
    log = "".join(f"09:{30 + epoch}:00 epoch {epoch}: train {p['train_loss']}, validation {p['val_loss']}\n"
                  for epoch, p in enumerate(curve, start=1))
    return TrainingRun.objects.create(
        state=JobState.SUCCEEDED, active_slot=None, done=8, total=8, parent=base, result=better, loss_curve=curve,
        n_labels=1630, log=log, config={"gate_metric": "step_auc", "train": {"head": "point", "mode": "lora"}})


def test_models_and_training_pictures(admin_page, live_server, model_history):
    page = admin_page
    page.goto(f"{live_server.url}/models/")
    rows = page.locator("table tbody tr")
    assert rows.count() == 3
    assert rows.first.locator("td.state").inner_text() == "current"
    assert "step AUC 0.781 on 412 labeled steps" in rows.first.locator("td.held-out").inner_text()
    assert "240 labeled solutions" in rows.first.locator("td.trained-on").inner_text()
    save(page, "models")

    page.goto(f"{live_server.url}/models/jobs/training/{model_history.pk}/")
    page.locator("#job-progress .state", has_text="succeeded").wait_for()
    assert page.locator("#job-progress svg polyline").count() == 2  # train and validation loss
    assert "epoch 8" in page.inner_text("pre.log")
    save(page, "training")
