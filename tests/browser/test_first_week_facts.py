"""What a new team reads on its pages agrees with the facts, in a real Chromium: the queue of an
untrained model says so, a waiting export says what it waits behind, and the home page counts the
solutions that wait as the start line does."""
import pytest
from django.urls import reverse

from annotate.labeling import queue_items, queueing
from annotate.models import ExportJob, Generation, ImportJob, LabelingConfig, Project, QueueItem
from jobs.states import JobState
from scoring.models import ModelVersion
from tests.browser.test_labeling_browser import log_in
from tests.factories import SolutionFactory, user_with_role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def admin(transactional_db):
    return user_with_role("admin", "admin", is_staff=True)


def test_the_queue_of_an_untrained_model_says_its_scores_rank_nothing_yet(new_page, live_server, admin):
    ModelVersion.objects.create(name="smollm2-untrained", path="x", weights_sha256="0" * 64,
                                metrics={"untrained": True})
    Generation.objects.create(number=1, model_version_name="smollm2-untrained")
    QueueItem.objects.create(solution=SolutionFactory(is_correct=False), generation=1, priority=9,
                             reason=QueueItem.Reason.CONVINCING_WRONG, score_at_selection=0.005)
    page = new_page()
    log_in(page, live_server, "admin")
    page.goto(f"{live_server.url}{reverse('scoring:queue')}")
    assert "a head not yet trained on any labels: its PRM scores rank nothing" in page.inner_text("main")
    assert page.inner_text("td.reason") == "convincing wrong answer"


def test_a_waiting_export_says_what_it_waits_behind(new_page, live_server, admin):
    running = ImportJob.objects.create(path="pool.jsonl", original_name="pool.jsonl", state=JobState.RUNNING)
    export = ExportJob.objects.create()
    page = new_page()
    log_in(page, live_server, "admin")
    page.goto(f"{live_server.url}{reverse('annotate:export-detail', args=[export.pk])}")
    waiting = page.locator("#job-progress .waiting")
    assert waiting.inner_text() == f"Waits for the default worker, behind import job {running.pk} (running)."
    # Once the import is done, the next poll of the page drops the line.
    ImportJob.objects.filter(pk=running.pk).update(state=JobState.SUCCEEDED)
    waiting.wait_for(state="detached", timeout=5000)


def test_the_home_page_counts_waiting_solutions_once_each_as_the_start_line_does(new_page, live_server, admin):
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"overlap_k": 3, "qc_rate": 0.5})
    SolutionFactory(is_gold=True)
    SolutionFactory.create_batch(2)
    queueing.ensure_default_queue()
    assert QueueItem.objects.filter(status=QueueItem.Status.AVAILABLE).count() > 2  # slots and gold besides
    page = new_page()
    log_in(page, live_server, "admin")
    home = " ".join(page.inner_text("main").split())
    assert queue_items.available_count() == 2 and "2 solutions waiting in the queue" in home, home
