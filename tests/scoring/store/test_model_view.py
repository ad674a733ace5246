"""The model's view an assisted task shows (annotate.labeling.assistance) is read where scoring
stores its scores: the current version's, from the moment it is current, and nobody else's."""
import pytest

from annotate.labeling import assistance, queueing, tasks
from annotate.models import LabelingConfig, Project
from scoring.models import ModelVersion
from scoring.store import registry
from tests.factories import SolutionFactory, store_step_scores

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def _version(name: str, **fields) -> ModelVersion:
    return ModelVersion.objects.create(name=name, path="/x", weights_sha256="0" * 64, **fields)


def test_the_current_models_p_reaches_the_task(annotator):
    solution = SolutionFactory(steps=["one", "two", "three"])
    current = _version("v1", is_current=True)
    store_step_scores(current, solution, [0.9, 0.2, 0.7])
    store_step_scores(current, solution, [0.1, 0.1, 0.1])  # written twice: the first scores stand
    assert assistance.model_ps(solution_id=solution.pk) == [0.9, 0.2, 0.7]
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"assistance": "suggest"})
    queueing.ensure_default_queue()
    task = queueing.claim_next(annotator=annotator)
    assert tasks.claimed_view(task).suggestion.first_error == 1


def test_a_candidates_scores_are_shown_only_once_it_is_current():
    solution = SolutionFactory(steps=["one", "two"])
    store_step_scores(_version("v1", is_current=True), solution, [0.9, 0.8])
    candidate = _version("v2")
    store_step_scores(candidate, solution, [0.3, 0.4])
    assert assistance.model_ps(solution_id=solution.pk) == [0.9, 0.8]
    registry.make_current_version(candidate)
    assert assistance.model_ps(solution_id=solution.pk) == [0.3, 0.4]


def test_steps_the_current_version_has_not_scored_have_no_view():
    solution = SolutionFactory(steps=["one", "two"])
    store_step_scores(_version("v1"), solution, [0.9, 0.8])  # not current
    assert assistance.model_ps(solution_id=solution.pk) == [None, None]
    registry.make_current_version(_version("v2"))
    assert assistance.model_ps(solution_id=solution.pk) == [None, None]
