"""Model pages: list with Rescore (admins), live job progress (htmx partial), the queue."""
import pytest
from django.http import Http404
from django.test import RequestFactory
from django.urls import reverse

from annotate.models import Generation, Project, QueueItem
from bench.tiny import build_tiny_prm
from jobs.states import JobState
from scoring.models import ModelVersion, RescoreJob
from scoring.store import registry
from scoring.web import review_views, views
from tests.factories import SolutionFactory, store_step_scores
from tests.scoring.projects import solution_in, two_projects


@pytest.fixture
def version(db, tmp_path):
    return registry.register_model_version(name="tiny-v", path=build_tiny_prm(tmp_path / "m"), make_current=True)


def test_anonymous_users_are_sent_to_login(client, db):
    response = client.get(reverse("scoring:models"))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


@pytest.mark.parametrize("name", ["scoring:models", "scoring:queue"])
def test_annotators_may_not_see_models_or_the_queue(client, annotator, name):
    client.force_login(annotator)
    assert client.get(reverse(name)).status_code == 403


def test_reviewers_see_versions_but_no_rescore_button(client, reviewer, version):
    client.force_login(reviewer)
    page = client.get(reverse("scoring:models")).content.decode()
    assert "tiny-v" in page and "Rescore</button>" not in page
    assert client.post(reverse("scoring:rescore", args=[version.pk])).status_code == 403
    assert not RescoreJob.objects.exists()


def test_admin_rescore_button_starts_a_job_and_shows_its_page(client, admin_user, version):
    client.force_login(admin_user)
    assert "Rescore</button>" in client.get(reverse("scoring:models")).content.decode()
    response = client.post(reverse("scoring:rescore", args=[version.pk]))
    job = RescoreJob.objects.get()
    assert (job.model_version, job.created_by, job.state) == (version, admin_user, JobState.PENDING)
    assert response["Location"] == reverse("scoring:rescore-job", args=[job.pk])


def test_rescore_needs_post_and_csrf(admin_user, version):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    assert client.get(reverse("scoring:rescore", args=[version.pk])).status_code == 405
    assert client.post(reverse("scoring:rescore", args=[version.pk])).status_code == 403


def test_the_rescore_button_only_records_the_job_even_for_a_changed_model(client, admin_user, version):
    """Hashing the files is the worker's job when it loads them: the request imports no torch."""
    from scoring.core.prm import StepHead

    StepHead(32).save(version.path)
    client.force_login(admin_user)
    response = client.post(reverse("scoring:rescore", args=[version.pk]))
    job = RescoreJob.objects.get()
    assert job.state == JobState.PENDING and response["Location"] == f"/models/jobs/rescore/{job.pk}/"


def test_job_progress_partial_polls_while_running_and_stops_when_done(client, reviewer, version):
    job = RescoreJob.objects.create(model_version=version, state=JobState.RUNNING, total=40, done=10,
                                    chunks_total=4, chunks_done=1)
    client.force_login(reviewer)
    url = reverse("scoring:rescore-job", args=[job.pk])
    partial = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert partial.lstrip().startswith('<div id="job-progress"') and "<html" not in partial
    assert 'hx-trigger="every 1s"' in partial and 'value="25"' in partial and "1/4 chunks" in partial
    assert f'hx-get="/models/jobs/rescore/{job.pk}/"' in partial
    RescoreJob.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, done=40, chunks_done=4, generation=3)
    done = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "hx-trigger" not in done and "generation 3" in done
    assert "<html" in client.get(url).content.decode()


def test_queue_page_shows_reason_and_score_in_serving_order(client, reviewer, db):
    Generation.objects.create(number=2, model_version_name="tiny-v")
    low, high = SolutionFactory(), SolutionFactory(is_correct=False)
    QueueItem.objects.create(solution=low, generation=2, priority=1, reason="random", score_at_selection=0.2)
    QueueItem.objects.create(
        solution=high, generation=2, priority=9, reason="convincing_wrong", score_at_selection=0.91
    )
    client.force_login(reviewer)
    page = client.get(reverse("scoring:queue")).content.decode()
    assert page.index("convincing wrong answer") < page.index(">random<")
    assert "0.910" in page and "wrong" in page
    assert "not yet trained" not in page


def test_the_queue_of_an_untrained_model_says_its_scores_rank_nothing_yet(client, reviewer, db):
    ModelVersion.objects.create(name="gen0", path="x", weights_sha256="0" * 64, metrics={"untrained": True})
    Generation.objects.create(number=1, model_version_name="gen0")
    QueueItem.objects.create(solution=SolutionFactory(is_correct=False), generation=1, priority=9,
                             reason="convincing_wrong", score_at_selection=0.005)
    client.force_login(reviewer)
    page = " ".join(client.get(reverse("scoring:queue")).content.decode().split())
    assert "gen0, a head not yet trained on any labels: its PRM scores rank nothing" in page


# --- model page safety: confirm, cancel, speed ----------------------------------------------------


@pytest.fixture
def rejected(version, tmp_path):
    newer = registry.register_model_version(name="rejected-v", path=build_tiny_prm(tmp_path / "r"))
    newer.status = newer.Status.REJECTED
    newer.save(update_fields=["status"])
    return newer


def test_the_current_model_is_listed_first_and_others_ask_for_confirmation(client, admin_user, version, rejected):
    client.force_login(admin_user)
    page = client.get(reverse("scoring:models")).content.decode()
    assert page.index("tiny-v") < page.index("rejected-v")  # newer, but not current
    assert page.count("Rescore</button>") == 1 and "Rescore…</button>" in page


def test_a_rejected_version_rebuilds_nothing_without_an_explicit_confirmation(client, admin_user, version, rejected):
    client.force_login(admin_user)
    url = reverse("scoring:rescore", args=[rejected.pk])
    page = client.post(url)
    assert page.status_code == 200 and not RescoreJob.objects.exists()
    text = page.content.decode()
    assert "not the current model" in text and "replaces the queue" in text and "rejected by the promotion gate" in text
    assert 'name="confirm" value="1"' in text
    assert client.post(url, {"confirm": "0"}).status_code == 200 and not RescoreJob.objects.exists()

    response = client.post(url, {"confirm": "1", "rebuild_queue": "0"})
    job = RescoreJob.objects.get()
    assert (job.model_version, job.rebuild_queue) == (rejected, False)
    assert response["Location"] == reverse("scoring:rescore-job", args=[job.pk])
    client.post(url, {"confirm": "1", "rebuild_queue": "1"})
    assert RescoreJob.objects.filter(model_version=rejected, rebuild_queue=True).count() == 1


def test_a_running_rescore_is_cancelled_by_an_admin_and_its_remaining_chunks_score_nothing(
    client, admin_user, reviewer, version
):
    from scoring.models import RescoreChunk, SolutionScore
    from scoring.rescoring import rescore as scoring

    solutions = SolutionFactory.create_batch(2)
    job = RescoreJob.objects.create(model_version=version, state=JobState.RUNNING, total=2, chunks_total=2)
    chunks = [RescoreChunk.objects.create(job=job, index=i, solution_ids=[s.pk]) for i, s in enumerate(solutions)]
    url = reverse("scoring:rescore-cancel", args=[job.pk])
    client.force_login(reviewer)
    assert "Cancel this rescore" not in client.get(reverse("scoring:rescore-job", args=[job.pk])).content.decode()
    assert client.post(url).status_code == 403
    client.force_login(admin_user)
    assert "Cancel this rescore" in client.get(reverse("scoring:rescore-job", args=[job.pk])).content.decode()
    assert client.post(url)["Location"] == reverse("scoring:rescore-job", args=[job.pk])
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.is_finished

    # The worker's next chunk finds the job cancelled: nothing scored, no queue rebuilt.
    assert scoring.run_chunk(chunk_id=chunks[0].pk) == 0
    assert not SolutionScore.objects.exists() and not Generation.objects.exists()
    assert not scoring.finish(job=job)
    page = client.get(reverse("scoring:rescore-job", args=[job.pk])).content.decode()
    assert "queue was not rebuilt" in page and "Cancel this rescore" not in page


def test_the_job_page_shows_tokens_per_second_and_the_time_left(client, reviewer, version):
    import datetime as dt
    import re

    from django.utils import timezone

    job = RescoreJob.objects.create(model_version=version, state=JobState.RUNNING, total=40, done=10,
                                    chunks_total=4, chunks_done=1, tokens_done=50_000,
                                    started_at=timezone.now() - dt.timedelta(seconds=100))
    client.force_login(reviewer)
    partial = client.get(reverse("scoring:rescore-job", args=[job.pk]), headers={"HX-Request": "true"}).content.decode()
    # 50,000 tokens and 10 of 40 solutions in 100 s (a little more by the time the page renders).
    speed = int(re.search(r"(\d+) tokens/s", partial).group(1))
    assert 480 <= speed <= 500
    assert re.search(r'about <span class="eta">5 min</span> left', partial)
    rates = job.rates(now=job.started_at + dt.timedelta(seconds=100))
    assert rates == {"tokens_per_second": 500.0, "eta_seconds": 300.0}


def test_the_models_page_states_each_versions_held_out_metrics_state_and_training_data(client, reviewer, db):
    from scoring.core import evaluation
    from scoring.models import ModelVersion
    from scoring.store import registry as versions

    samples = [evaluation.LabeledSample(1, [0.9, 0.2], [1, 0], 1),
               evaluation.LabeledSample(2, [0.7, 0.6], [1, 1], None)]
    problems = [[evaluation.Candidate([0.9], True, "1"), evaluation.Candidate([0.2], False, "2")]]
    measured = {"eval": evaluation.evaluate(samples, problems),
                "trained_on": {"solutions": 40, "step_labels": 96, "labels": "human", "generation": 3,
                               "head": "beta", "mode": "head", "backbone": "SmolLM2-135M-Instruct"}}

    def make(name, **fields):
        return ModelVersion.objects.create(name=name, path="/x", weights_sha256="0" * 64, **fields)

    first = make("run1-point-head", config={"head": {"type": "point"}, "backbone": "/models/SmolLM2-135M-Instruct"})
    versions.set_current_model(first, project=Project.objects.sole())
    second = make("run2-beta-head", metrics=measured)
    versions.set_current_model(second, project=Project.objects.sole())  # the first is superseded: no longer "promoted"
    make("run3-beta-head", status=ModelVersion.Status.REJECTED)
    make("run4-beta-head", status=ModelVersion.Status.NOT_ENOUGH_EVIDENCE)
    client.force_login(reviewer)
    page = client.get(reverse("scoring:models")).content.decode()
    states = {name: page.split(name, 1)[1].split('class="state">', 1)[1].split("<", 1)[0]
              for name in ["run1-point-head", "run2-beta-head", "run3-beta-head", "run4-beta-head"]}
    assert states == {"run1-point-head": "superseded", "run2-beta-head": "current",
                      "run3-beta-head": "rejected", "run4-beta-head": "not enough evidence"}
    assert "promoted" not in page.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    assert "step AUC 1.000 on 4 labeled steps of 2 solutions" in page
    assert "first-error F1 1.000 on 2 solutions" in page and "best-of-2 accuracy 1.000 on 1 problem" in page
    assert ("40 labeled solutions (96 step labels, human) up to generation 3; beta head (head) "
            "on SmolLM2-135M-Instruct") in page
    assert "not trained here; point head on SmolLM2-135M-Instruct" in page
    assert "not measured on held-out labels" in page


# --- projects -------------------------------------------------------------------------------------


def in_project(project, user, path: str = "/"):
    """A request as the project middleware hands it on: for `path` in `project`, by `user`."""
    request = RequestFactory().get(path)
    request.user, request.project, request.htmx = user, project, False
    return request


def test_the_models_page_shows_the_projects_lineage_and_the_public_prms_with_its_own_current_model(admin_user):
    gsm8k, math = two_projects()

    def make(name, **fields):
        return ModelVersion.objects.create(name=name, path="/x", weights_sha256="0" * 64, **fields)

    make("public-prm")
    ours = make("gsm8k-run1", project=gsm8k)
    theirs, lent = make("math-run1", project=math), make("math-run2", project=math)
    registry.set_current_model(ours, project=gsm8k)
    registry.set_current_model(lent, project=gsm8k)  # trained in the other project, current in this one
    registry.set_current_model(theirs, project=math)
    page = views.model_list(in_project(gsm8k, admin_user)).content.decode()
    assert "public-prm" in page and "gsm8k-run1" in page and "math-run2" in page and "math-run1" not in page
    assert page.index("math-run2") < page.index("public-prm")  # the current model first
    states = {name: page.split(name, 1)[1].split('class="state">', 1)[1].split("<", 1)[0]
              for name in ("math-run2", "gsm8k-run1")}
    assert states == {"math-run2": "current", "gsm8k-run1": "superseded"}
    assert "public-prm" in views.model_list(in_project(math, admin_user)).content.decode()


def test_another_projects_job_version_solution_and_queue_are_not_found(admin_user):
    gsm8k, math = two_projects()
    theirs = ModelVersion.objects.create(name="theirs", path="/x", weights_sha256="0" * 64, project=math)
    registry.set_current_model(theirs, project=math)
    job = RescoreJob.objects.create(project=math, model_version=theirs)
    solution = solution_in(math, steps=["one"])
    store_step_scores(theirs, solution, [0.4])
    QueueItem.objects.create(project=math, solution=solution, generation=0, slot=0, priority=1)
    ours = in_project(gsm8k, admin_user)
    for view, argument in ((views.rescore_job, job.pk), (review_views.review_scores, solution.pk),
                           (views.download_model, theirs.pk)):
        with pytest.raises(Http404):
            view(ours, argument, *(["step_token"] if view is views.download_model else []))
    assert str(solution.problem.statement) not in views.queue(ours).content.decode()
    assert str(solution.problem.statement) in views.queue(in_project(math, admin_user)).content.decode()
    assert "0.400" in review_views.review_scores(in_project(math, admin_user), solution.pk).content.decode()
