"""The model's view an assisted task shows (annotate.labeling.assistance) is read where scoring
stores its scores: the current version's of the solution's project, from the moment it is current
there, and nobody else's."""
import pytest

from annotate.labeling import assistance, queueing, tasks
from annotate.models import LabelingConfig, Project
from scoring.models import ModelVersion
from scoring.store import registry
from tests.factories import SolutionFactory, store_step_scores
from tests.scoring.projects import solution_in, two_projects

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def _version(name: str, **fields) -> ModelVersion:
    return ModelVersion.objects.create(name=name, path="/x", weights_sha256="0" * 64, **fields)


def _current(name: str, project: Project | None = None) -> ModelVersion:
    version = _version(name)
    registry.set_current_model(version, project=project or Project.objects.sole())
    return version


def test_the_current_models_p_reaches_the_task(annotator):
    solution = SolutionFactory(steps=["one", "two", "three"])
    current = _current("v1")
    store_step_scores(current, solution, [0.9, 0.2, 0.7])
    store_step_scores(current, solution, [0.1, 0.1, 0.1])  # written twice: the first scores stand
    assert assistance.model_ps(solution_id=solution.pk) == [0.9, 0.2, 0.7]
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"assistance": "suggest"})
    queueing.ensure_default_queue()
    task = queueing.claim_next(annotator=annotator)
    assert tasks.claimed_view(task).suggestion.first_error == 1


def test_a_candidates_scores_are_shown_only_once_it_is_current():
    solution = SolutionFactory(steps=["one", "two"])
    store_step_scores(_current("v1"), solution, [0.9, 0.8])
    candidate = _version("v2")
    store_step_scores(candidate, solution, [0.3, 0.4])
    assert assistance.model_ps(solution_id=solution.pk) == [0.9, 0.8]
    registry.set_current_model(candidate, project=solution.project)
    assert assistance.model_ps(solution_id=solution.pk) == [0.3, 0.4]


def test_steps_the_current_version_has_not_scored_have_no_view():
    solution = SolutionFactory(steps=["one", "two"])
    store_step_scores(_version("v1"), solution, [0.9, 0.8])  # not current
    assert assistance.model_ps(solution_id=solution.pk) == [None, None]
    _current("v2")
    assert assistance.model_ps(solution_id=solution.pk) == [None, None]


def test_each_project_sees_its_own_current_models_scores():
    gsm8k, math = two_projects()
    ours, theirs = solution_in(gsm8k, steps=["one", "two"]), solution_in(math, steps=["one", "two"])
    a, b = _current("a", gsm8k), _current("b", math)
    for solution in (ours, theirs):
        store_step_scores(a, solution, [0.9, 0.8])
        store_step_scores(b, solution, [0.1, 0.2])
    assert assistance.model_ps(solution_id=ours.pk) == [0.9, 0.8]
    assert assistance.model_ps(solution_id=theirs.pk) == [0.1, 0.2]


def test_one_version_may_be_current_in_two_projects_and_making_it_current_in_one_changes_only_that_one():
    gsm8k, math = two_projects()
    shared = _version("public-prm")  # registered in no project
    registry.set_current_model(shared, project=gsm8k)
    registry.set_current_model(shared, project=math)
    assert registry.current_model(gsm8k) == registry.current_model(math) == shared
    trained = _version("trained-in-math", project=math)
    registry.set_current_model(trained, project=gsm8k)  # a version of another project may serve this one
    assert (registry.current_model(gsm8k), registry.current_model(math)) == (trained, shared)
    assert list(ModelVersion.objects.lineage(math).order_by("name")) == [shared, trained]
    assert list(ModelVersion.objects.lineage(gsm8k)) == [trained]
    flags = dict(ModelVersion.objects.with_current(math).values_list("name", "is_current"))
    assert flags == {"public-prm": True, "trained-in-math": False}
