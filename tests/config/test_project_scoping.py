"""Every route is a project's, and a project's routes reach only its own objects.

The routes are enumerated from the URL conf, so a route added later is checked too: one this file
does not know how to fill in fails `test_every_route_is_known_here`.
"""
import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from annotate.labeling import queueing, roles
from annotate.models import Annotation, ExportJob, ImportJob, Project, Step
from scoring.generation import judge_labeling
from scoring.models import GenerationRun, ModelVersion, RescoreJob, SolutionScore, StepScore, TrainingRun
from tests.factories import SolutionFactory, UserFactory

# Routes that are not a project's: the site's sign-in, map, admin and project list.
SITE_ROUTES = {"login", "logout", "api-schema", "api-docs", "api-project-list", "api-project-detail", "api-root",
               "", "annotate:home"}
# What each route's argument names, as the kind of object it is (see `objects_of`).
ARGUMENT_KINDS = {
    "annotate:label-task": "own_task", "annotate:label-rate": "own_task", "annotate:label-flag": "own_task",
    "annotate:label-undo": "own_task", "annotate:label-complete": "own_task", "annotate:label-heartbeat": "own_task",
    "annotate:label-submit": "own_task",
    "annotate:review-detail": "annotation", "annotate:review-override": "annotation",
    "annotate:review-make-gold": "annotation", "annotate:review-add-to-screening": "annotation",
    "annotate:quality-reset-screening": "member", "annotate:member-role": "member", "annotate:member-remove": "member",
    "annotate:import-detail": "import", "annotate:import-report": "import",
    "annotate:export-detail": "export", "annotate:export-download": "export",
    "api-problem-detail": "problem", "api-solution-detail": "solution", "api-solution-sources": "solution",
    "api-annotation-detail": "annotation",
    "api-import-detail": "import", "api-export-detail": "export", "api-export-download": "export",
    "api-model-version-detail": "version", "api-training-run-detail": "training",
    "api-solution-score-detail": "solution_score", "api-step-score-detail": "step_score",
    "scoring:rescore": "version", "scoring:rescore-job": "rescore", "scoring:rescore-cancel": "rescore",
    "scoring:export-model": "version", "scoring:download-model": "version", "scoring:evaluation": "version",
    "scoring:review-scores": "solution", "scoring:training-run": "training", "scoring:generation-run": "generation",
    "scoring:generation-cancel": "generation",
    "scoring:judge-job": "judge", "scoring:judge-cancel": "judge", "api-judge-job-detail": "judge",
}


def routes(patterns=None, prefix="", namespace=""):
    """(path pattern, name) of every route but the Django admin's."""
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(pattern, URLResolver):
            if str(pattern.pattern).startswith("admin/"):
                continue
            inner = f"{pattern.namespace}:" if pattern.namespace else namespace
            yield from routes(pattern.url_patterns, prefix + str(pattern.pattern), inner)
        elif isinstance(pattern, URLPattern) and pattern.name:
            yield prefix + str(pattern.pattern), namespace + pattern.name


def project_routes():
    return sorted({(path, name) for path, name in routes() if name not in SITE_ROUTES
                   and "format" not in path and name != "annotate:home"})


def fill(path: str, value) -> str:
    """A concrete path: every argument of the pattern set to `value`, the regex marks taken off."""
    path = re.sub(r"\(\?P<\w+>[^)]*\)", str(value), path)
    path = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: "prm800k" if m[1] == "export_format" else str(value), path)
    return path.replace("^", "").replace("$", "").replace("\\.", ".")


def ask(client: Client, url: str) -> int:
    """The status of the route, asked as its page would: GET, or POST where GET is not allowed."""
    status = client.get(url).status_code
    return client.post(url).status_code if status == 405 else status


@pytest.fixture
def two_projects(db):
    """Project A and project B, each with a solution, a submitted and an in-progress annotation,
    jobs and a model version; `both` administers both, `only_a` administers A alone."""
    a = Project.objects.create(slug="alpha", name="Alpha")
    b = Project.objects.create(slug="beta", name="Beta")
    both, only_a, only_b = (UserFactory(username=name) for name in ("both", "only-a", "only-b"))
    for project in (a, b):
        roles.grant_role(both, roles.ADMIN, project)
    roles.grant_role(only_a, roles.ADMIN, a)
    roles.grant_role(only_b, roles.ANNOTATOR, b)
    return a, b, both, only_a, objects_of(b, both, only_b)


def objects_of(project: Project, user, member) -> dict:
    """One object of each kind in `project`, by the kind names of ARGUMENT_KINDS."""
    solution = SolutionFactory(problem__project=project, project=project)
    other = SolutionFactory(problem__project=project, project=project)
    submitted = Annotation.objects.create(project=project, solution=solution, annotator=member,
                                          labeler=member.username, status=Annotation.Status.SUBMITTED)
    queueing.ensure_default_queue(project)
    own_task = queueing.claim_next(annotator=user, project=project)
    assert own_task is not None and own_task.solution_id == other.pk
    version = ModelVersion.objects.create(name=f"{project.slug}-v1", path="/nowhere", weights_sha256="0" * 64,
                                          project=project)
    step = Step.objects.filter(solution=solution).first()
    return {
        "own_task": own_task.pk, "annotation": submitted.pk, "member": member.pk, "problem": solution.problem_id,
        "solution": solution.pk, "version": version.pk,
        "import": ImportJob.objects.create(project=project, path="/nowhere.jsonl").pk,
        "export": ExportJob.objects.create(project=project).pk,
        "rescore": RescoreJob.objects.create(project=project, model_version=version).pk,
        "training": TrainingRun.objects.create(project=project).pk,
        "generation": GenerationRun.objects.create(project=project, prompt_template="{problem}",
                                                    generator_spec={"backend": "openai", "model": "m"}).pk,
        "solution_score": SolutionScore.objects.create(solution=solution, model_version=version, product=0.5,
                                                       min=0.5, last=0.5, mean=0.5).pk,
        "step_score": StepScore.objects.create(step=step, model_version=version, p=0.5).pk,
        "judge": judge_labeling.start_judge_labeling(
            project=project, generator_spec={"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"},
            enqueue=False).pk,
    }


def test_every_route_is_known_here():
    unknown = [name for path, name in project_routes() if "<" in path or "(?P" in path
               if name not in ARGUMENT_KINDS]
    assert unknown == [], f"routes with arguments this file cannot fill in: {unknown}"


@pytest.mark.django_db
def test_a_non_member_gets_404_for_every_route_of_the_project(two_projects):
    _, b, _, only_a, objects = two_projects
    client = Client()
    client.force_login(only_a)
    answers = {name: ask(client, f"/p/{b.slug}/" + fill(path, objects.get(ARGUMENT_KINDS.get(name), 1)))
               for path, name in project_routes()}
    answers["the project's home"] = ask(client, f"/p/{b.slug}/")
    assert {name: status for name, status in answers.items() if status != 404} == {}


@pytest.mark.django_db
def test_a_member_asking_for_another_projects_object_gets_404_for_every_route(two_projects):
    a, _, both, _, objects = two_projects
    client = Client()
    client.force_login(both)
    answers = {name: ask(client, f"/p/{a.slug}/" + fill(path, objects[ARGUMENT_KINDS[name]]))
               for path, name in project_routes() if name in ARGUMENT_KINDS}
    assert {name: status for name, status in answers.items() if status != 404} == {}


@pytest.mark.django_db
def test_the_same_objects_answer_in_their_own_project(two_projects):
    """The 404s above are the project's doing: the same requests in B's URLs find B's objects."""
    _, b, both, _, objects = two_projects
    client = Client()
    client.force_login(both)
    for name in ("annotate:review-detail", "annotate:label-task", "annotate:import-detail", "api-solution-detail"):
        path = {n: p for p, n in project_routes()}[name]
        assert client.get(f"/p/{b.slug}/" + fill(path, objects[ARGUMENT_KINDS[name]])).status_code == 200, name


@pytest.mark.django_db
def test_the_project_list_shows_only_the_users_projects(two_projects):
    a, b, _, only_a, _ = two_projects
    client = Client()
    client.force_login(only_a)
    listed = client.get("/api/projects").json()
    assert [p["slug"] for p in listed] == [a.slug] and listed[0]["role"] == roles.ADMIN
    assert client.get(f"/api/projects/{b.slug}").status_code == 404
    # With one project, the home page goes straight to it.
    assert client.get("/").headers["Location"] == f"/p/{a.slug}/"


@pytest.mark.django_db
def test_with_several_projects_a_page_outside_any_project_names_none(two_projects):
    _, _, both, _, _ = two_projects
    client = Client()
    client.force_login(both)
    assert client.get("/label/").status_code == 404
    page = client.get("/").content.decode()
    assert "/p/alpha/" in page and "/p/beta/" in page
    assert get_user_model().objects.get(username="both").memberships.count() == 2


@pytest.mark.django_db
def test_a_database_with_no_project_yet_serves_its_pages_as_the_default_project():
    # A flushed or hand-emptied database: the first page asked for makes the project every row
    # defaults to, as a service's own `project=None` does.
    Project.objects.all().delete()
    client = Client()
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    assert client.get("/imports/").status_code == 200
    assert Project.objects.get().slug == "default"
