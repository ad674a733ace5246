"""The judge page and API (scoring.web.judge_views, scoring.web.api.judging): start a judge job, watch
its progress, unparseable answers and tokens; admins only."""
import json

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from annotate.models import AutoLabelRun, JudgeAnswer
from jobs.states import JobState
from scoring.generation import judge_labeling, judging
from scoring.models import JudgeLabelJob
from steps import verification
from tests.factories import SolutionFactory

SERVER_SPEC = {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "judge-7b", "mode": "chat"}


def page_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api_client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def job_with_answers(solutions, *, unparseable: int) -> JudgeLabelJob:
    """A judge job whose first `unparseable` solutions got unreadable answers, the rest read ones."""
    job = judge_labeling.start_judge_labeling(solution_ids=[s.pk for s in solutions], generator_spec=SERVER_SPEC,
                                              enqueue=False)
    for i, solution in enumerate(solutions):
        JudgeAnswer.objects.create(run=job.run, solution=solution, parsed=i >= unparseable,
                                   text="Looks fine" if i < unparseable else "ok\nStep 1: correct",
                                   error="no verdicts: none" if i < unparseable else "", completion_tokens=7)
    AutoLabelRun.objects.filter(pk=job.run_id).update(tokens=7 * len(solutions))
    JudgeLabelJob.objects.filter(pk=job.pk).update(state=JobState.RUNNING, done=len(solutions),
                                                   unparseable=unparseable)
    return job


@pytest.mark.django_db
def test_an_admin_starts_a_judge_job_from_the_page_and_lands_on_its_progress(admin_user):
    solutions = [SolutionFactory(), SolutionFactory()]
    response = page_client(admin_user).post(reverse("scoring:judge-jobs"), {
        "generator": json.dumps(SERVER_SPEC), "solution_ids": f"{solutions[0].pk}", "max_tokens": 300,
        "temperature": 0})
    job = JudgeLabelJob.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("scoring:judge-job", args=[job.pk])
    assert (job.solution_ids, job.created_by, job.run.params["sampling"]["max_tokens"]) == (
        [solutions[0].pk], admin_user, 300)
    assert job.run.source == "openai:http://127.0.0.1:9/v1/judge-7b"


@pytest.mark.django_db
def test_a_bad_generator_comes_back_on_the_form_named(admin_user):
    page = page_client(admin_user).post(reverse("scoring:judge-jobs"), {
        "generator": "{nope", "max_tokens": 300, "temperature": 0})
    assert page.status_code == 200 and "--generator: not valid JSON" in page.content.decode()
    page = page_client(admin_user).post(reverse("scoring:judge-jobs"), {
        "generator": json.dumps({"backend": "openai", "model": "m"}), "max_tokens": 300, "temperature": 0})
    assert "base_url: required for the openai backend" in page.content.decode()
    assert not JudgeLabelJob.objects.exists()


@pytest.mark.django_db
def test_the_page_lists_jobs_with_progress_unparseable_count_and_tokens(admin_user):
    job_with_answers([SolutionFactory(), SolutionFactory(), SolutionFactory()], unparseable=1)
    page = page_client(admin_user).get(reverse("scoring:judge-jobs")).content.decode()
    assert '<td class="progress">3/3</td>' in page and '<td class="unparseable">1</td>' in page
    assert "<td>21</td>" in page and judging.prompt_version(verification.DEFAULT_TEMPLATE) in page
    assert "Step N: correct" in page  # the prompt template new jobs use


@pytest.mark.django_db
def test_a_jobs_page_polls_while_active_and_lists_its_unparseable_answers_raw(admin_user):
    job = job_with_answers([SolutionFactory(), SolutionFactory()], unparseable=1)
    client = page_client(admin_user)
    url = reverse("scoring:judge-job", args=[job.pk])
    page = client.get(url).content.decode()
    assert "Judge job" in page and 'hx-trigger="every 1s"' in page
    partial = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "<h1>" not in partial and "2 solutions answered: 1 unparseable" in partial
    assert "no verdicts: none" in partial and "Looks fine" in partial
    JudgeLabelJob.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED)
    assert "hx-trigger" not in client.get(url, headers={"HX-Request": "true"}).content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize(("role", "status"), [("annotator", 403), ("reviewer", 403)])
def test_only_admins_reach_the_judge_page_and_api(annotator, reviewer, role, status):
    user = {"annotator": annotator, "reviewer": reviewer}[role]
    assert page_client(user).get(reverse("scoring:judge-jobs")).status_code == status
    client = api_client(user)
    assert client.get("/api/judge-jobs").status_code == status
    assert client.post("/api/judge-jobs", {"generator": SERVER_SPEC}, format="json").status_code == status
    assert not JudgeLabelJob.objects.exists()


@pytest.mark.django_db
def test_the_api_starts_a_judge_job_and_answers_its_state(admin_user, django_capture_on_commit_callbacks):
    solution = SolutionFactory()
    client = api_client(admin_user)
    with django_capture_on_commit_callbacks() as sent:
        created = client.post("/api/judge-jobs", {"generator": SERVER_SPEC, "solution_ids": [solution.pk],
                                                  "max_tokens": 400}, format="json")
    assert created.status_code == 201 and len(sent) == 1  # its task is sent once the job is committed
    body = created.json()
    assert (body["state"], body["total"], body["unparseable"], body["tokens"]) == ("pending", 1, 0, 0)
    assert body["judge"] == "openai:http://127.0.0.1:9/v1/judge-7b" and len(body["prompt_version"]) == 12
    job = job_with_answers([SolutionFactory(), SolutionFactory()], unparseable=2)
    polled = client.get(f"/api/judge-jobs/{job.pk}").json()
    assert (polled["state"], polled["done"], polled["unparseable"], polled["tokens"]) == ("running", 2, 2, 14)


@pytest.mark.django_db
def test_the_api_names_a_bad_request(admin_user):
    client = api_client(admin_user)
    bad_json = client.post("/api/judge-jobs", {"generator": "{nope"}, format="json")
    assert bad_json.status_code == 400 and "not valid JSON" in bad_json.content.decode()
    no_url = client.post("/api/judge-jobs", {"generator": {"backend": "openai", "model": "m"}}, format="json")
    assert no_url.status_code == 400 and "base_url" in no_url.content.decode()
    assert not JudgeLabelJob.objects.exists()


@pytest.mark.django_db
def test_an_admin_cancels_an_active_job_from_its_page_and_a_worker_then_leaves_it(admin_user):
    job = job_with_answers([SolutionFactory(), SolutionFactory()], unparseable=0)
    client = page_client(admin_user)
    assert "Cancel this job" in client.get(reverse("scoring:judge-job", args=[job.pk])).content.decode()
    response = client.post(reverse("scoring:judge-cancel", args=[job.pk]))
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.error == f"cancelled by {admin_user}"
    assert judge_labeling.run_judge_job(job_id=job.pk, resend=False).state == JobState.CANCELLED
    assert "Cancelled: the answers" in client.get(reverse("scoring:judge-job", args=[job.pk])).content.decode()
