"""`remove_demo` and the home page's button take the demo pool away but for the solutions someone has labeled."""
import io

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from annotate.models import Annotation, Problem, Project, Solution
from annotate.pool import demo
from scoring.models import ModelVersion, StepScore
from tests.factories import SolutionFactory, UserFactory, user_with_role


@pytest.mark.django_db
def test_remove_demo_keeps_labeled_solutions_their_problems_and_every_other_pool():
    call_command("seed_demo", problems=3, stdout=io.StringIO())
    gsm8k, math = Project.objects.get(slug="gsm8k-demo"), Project.objects.get(slug="math-demo")
    demo = Solution.objects.filter(project=gsm8k, source="demo").select_related("problem").order_by("pk")
    labeled = demo.first()
    drafted = demo.exclude(problem=labeled.problem).first()
    Annotation.objects.create(project=gsm8k, solution=labeled, annotator=UserFactory(), labeler="a",
                              status="submitted")
    # A label being written counts too: it is someone's work.
    Annotation.objects.create(project=gsm8k, solution=drafted, annotator=UserFactory(), labeler="b")
    version = ModelVersion.objects.create(name="v", path="x", weights_sha256="0" * 64)
    scored = demo.exclude(pk__in=[labeled.pk, drafted.pk]).first()
    StepScore.objects.create(step=scored.steps.first(), model_version=version, p=0.5)
    imported = SolutionFactory(problem__project=gsm8k, project=gsm8k)
    math_pool = set(Solution.objects.filter(project=math))

    out = io.StringIO()
    call_command("remove_demo", "--project", "gsm8k-demo", stdout=out)

    assert set(Solution.objects.filter(project=gsm8k)) == {labeled, drafted, imported}
    assert set(Problem.objects.filter(project=gsm8k, source="demo")) == {labeled.problem, drafted.problem}
    assert not StepScore.objects.exists()
    assert out.getvalue().startswith("Demo pool of gsm8k-demo: removed ") and "kept 2 labeled" in out.getvalue()
    assert "--no-demo" in out.getvalue()
    # The other demo project's pool is its own: untouched.
    assert set(Solution.objects.filter(project=math)) == math_pool


@pytest.mark.django_db
def test_remove_demo_with_several_projects_and_none_named_names_the_choices():
    call_command("seed_demo", problems=1, stdout=io.StringIO())
    with pytest.raises(CommandError, match="gsm8k-demo, math-demo"):
        call_command("remove_demo", stdout=io.StringIO())


def _client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


PROJECT = "/p/gsm8k-demo"  # the demo project these pages are asked in


def url(name: str) -> str:
    return PROJECT + reverse(name)


@pytest.fixture
def demo_pool(db):
    """The GSM8K demo project's demo solutions (seed_demo makes two projects)."""
    call_command("seed_demo", problems=2, stdout=io.StringIO())
    return list(demo_of())


def demo_of(project_slug: str = "gsm8k-demo"):
    return Solution.objects.demo().filter(project__slug=project_slug)


def test_an_admin_sees_the_button_while_demo_data_exists_and_removing_says_how_many(demo_pool, admin_user):
    labeled = demo_pool[0]
    Annotation.objects.create(project=labeled.project, solution=labeled, annotator=UserFactory(), labeler="a",
                              status="submitted")
    client = _client_for(admin_user)
    home = client.get(url("annotate:home")).content.decode()
    assert "Remove demo data" in home and url("annotate:remove-demo") in home

    response = client.post(url("annotate:remove-demo"), follow=True)

    page = response.content.decode()
    assert response.redirect_chain == [(url("annotate:home"), 302)]
    assert f"Removed {len(demo_pool) - 1} demo solutions" in page and "Kept 1 that someone annotated" in page
    assert list(demo_of()) == [labeled]
    # Only the annotated solution is left, so there is nothing for the button to remove.
    assert "Remove demo data" not in page


def test_the_command_and_the_button_apply_the_same_rule(demo_pool, admin_user):
    Annotation.objects.create(project=demo_pool[0].project, solution=demo_pool[0], annotator=UserFactory(), labeler="a")
    assert set(demo.removable(demo_pool[0].project)) == set(demo_pool[1:])
    _client_for(admin_user).post(url("annotate:remove-demo"))
    assert set(demo_of()) == {demo_pool[0]}


def test_an_annotator_neither_sees_the_button_nor_may_remove_the_demo(demo_pool):
    client = _client_for(user_with_role("ann", "annotator", demo_pool[0].project))
    assert "Remove demo data" not in client.get(url("annotate:home")).content.decode()
    assert client.post(url("annotate:remove-demo")).status_code == 403
    assert demo_of().count() == len(demo_pool)


def test_a_get_removes_nothing(demo_pool, admin_user):
    assert _client_for(admin_user).get(url("annotate:remove-demo")).status_code == 405
    assert demo_of().count() == len(demo_pool)


def test_the_button_is_hidden_without_demo_data(admin_user):
    assert "Remove demo data" not in _client_for(admin_user).get(reverse("annotate:home"), follow=True).content.decode()


def test_the_removal_needs_a_csrf_token(demo_pool, admin_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    assert client.post(url("annotate:remove-demo")).status_code == 403
    assert demo_of().count() == len(demo_pool)
