"""The model side's API answers for the request's project: the versions it may use with its own
current model marked, its runs, the scores of its solutions, and scoring with its current model."""
import pytest
from rest_framework.test import APIRequestFactory, force_authenticate

from scoring.models import ModelVersion, TrainingRun
from scoring.store import registry
from scoring.web.api import views
from tests.factories import store_step_scores
from tests.scoring.projects import solution_in, two_projects

pytestmark = pytest.mark.django_db


def listed(viewset, project, user, **query) -> list[dict]:
    request = APIRequestFactory().get("/", query)
    request.project = project
    force_authenticate(request, user=user)
    response = viewset.as_view({"get": "list"})(request)
    assert response.status_code == 200, response.data
    return response.data["results"] if isinstance(response.data, dict) else response.data


def make(name, **fields) -> ModelVersion:
    return ModelVersion.objects.create(name=name, path="/x", weights_sha256="0" * 64, **fields)


def test_each_project_lists_its_versions_runs_and_scores_with_its_own_current_model(admin_user):
    gsm8k, math = two_projects()
    public, ours, theirs = make("public-prm"), make("gsm8k-run1", project=gsm8k), make("math-run1", project=math)
    registry.set_current_model(public, project=gsm8k)
    registry.set_current_model(theirs, project=math)
    TrainingRun.objects.create(project=math)
    solution = solution_in(math, steps=["one"])
    store_step_scores(theirs, solution, [0.25])

    versions = {row["name"]: (row["is_current"], row["project"])
                for row in listed(views.ModelVersionViewSet, gsm8k, admin_user)}
    assert versions == {"public-prm": (True, None), "gsm8k-run1": (False, "gsm8k")}
    versions = {row["name"]: row["is_current"] for row in listed(views.ModelVersionViewSet, math, admin_user)}
    assert versions == {"public-prm": False, "math-run1": True}
    assert listed(views.TrainingRunViewSet, gsm8k, admin_user) == []
    assert len(listed(views.TrainingRunViewSet, math, admin_user)) == 1
    assert listed(views.StepScoreViewSet, gsm8k, admin_user) == []
    assert [row["p"] for row in listed(views.StepScoreViewSet, math, admin_user)] == [0.25]
    assert listed(views.SolutionScoreViewSet, gsm8k, admin_user) == []
    assert ours.pk not in [row["id"] for row in listed(views.ModelVersionViewSet, math, admin_user)]


def test_a_request_may_name_a_version_its_project_may_use_and_no_other():
    gsm8k, math = two_projects()
    public, ours = make("public-prm"), make("gsm8k-run1", project=gsm8k)
    registry.set_current_model(ours, project=gsm8k)
    assert registry.find_version(None, project=gsm8k) == ours and registry.find_version(None, project=math) is None
    assert registry.find_version("public-prm", project=math) == public
    with pytest.raises(registry.UnknownModelVersion, match="'gsm8k-run1': no such model version in math"):
        registry.find_version("gsm8k-run1", project=math)
