"""The model's view handed down to the labeling side: a current version's stored step scores
reach annotate's Step.model_p, and so an assisted task (annotate.labeling.assistance)."""
import pytest

from annotate.labeling import queueing, tasks
from annotate.models import LabelingConfig, Step
from scoring.core.step_scores import StepProbability
from scoring.models import ModelVersion
from scoring.rescoring import scores
from scoring.store import registry
from tests.factories import SolutionFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def _version(name: str, **fields) -> ModelVersion:
    return ModelVersion.objects.create(name=name, path="/x", weights_sha256="0" * 64, **fields)


def _score(version: ModelVersion, solution, ps: list[float]) -> None:
    step_ids = list(solution.steps.order_by("index").values_list("pk", flat=True))
    scores.write_scores(model_version=version, solution_ids=[solution.pk], step_ids=[step_ids],
                        results=[[StepProbability(p) for p in ps]])


def _model_ps(solution) -> list:
    return list(Step.objects.filter(solution=solution).order_by("index").values_list("model_p", flat=True))


def test_the_current_models_p_reaches_the_task(annotator):
    solution = SolutionFactory(steps=["one", "two", "three"])
    current = _version("v1", is_current=True)
    _score(current, solution, [0.9, 0.2, 0.7])
    _score(current, solution, [0.1, 0.1, 0.1])  # written twice: the first scores stand
    assert _model_ps(solution) == [0.9, 0.2, 0.7]
    LabelingConfig.objects.update_or_create(pk=1, defaults={"assistance": "suggest"})
    queueing.ensure_default_queue()
    task = queueing.claim_next(annotator=annotator)
    assert tasks.claimed_view(task).suggestion.first_error == 1


def test_a_candidates_scores_are_handed_down_only_when_it_becomes_current():
    solution = SolutionFactory(steps=["one", "two"])
    _score(_version("v1", is_current=True), solution, [0.9, 0.8])
    candidate = _version("v2")
    _score(candidate, solution, [0.3, 0.4])
    assert _model_ps(solution) == [0.9, 0.8]
    registry.make_current_version(candidate)
    assert _model_ps(solution) == [0.3, 0.4]
