"""Generation 0 from the bundled SmolLM2 GGUF: converted offline once, scores real text."""
import pytest
import torch
from django.core.management import call_command

from annotate.models import Project, Step
from scoring.core.prm import load_prm
from scoring.models import ModelVersion, SolutionScore, StepScore
from scoring.rescoring import scores
from scoring.store import default_model, registry
from tests.factories import SolutionFactory
from tests.scoring.projects import two_projects


@pytest.mark.slow
def test_default_model_is_converted_once_registered_current_and_scores_solutions(db, settings, tmp_path):
    settings.MODELS_DIR = tmp_path
    registry.forget_loaded()
    call_command("init_default_model")
    version = registry.current_model(Project.objects.sole())
    assert version.name == default_model.VERSION_NAME and version.kind == "head"
    backbone = tmp_path / default_model.BACKBONE_NAME
    assert (backbone / "model.safetensors").exists() and not list(tmp_path.glob("*.partial"))

    # A second run finds everything in place: no new version, no new conversion.
    mtime = (backbone / "model.safetensors").stat().st_mtime
    call_command("init_default_model")
    assert ModelVersion.objects.count() == 1 and (backbone / "model.safetensors").stat().st_mtime == mtime

    solutions = [
        SolutionFactory(steps=["We need 2 + 3.", "2 + 3 = 5.", "# Answer\n\n5"]),
        SolutionFactory(steps=["Multiply: 4 * 6 = 24.", "# Answer\n\n24"], is_correct=False),
    ]
    assert scores.score_solutions(model_version=version, solution_ids=[s.pk for s in solutions]) == 2
    assert StepScore.objects.count() == Step.objects.count() == 5
    assert all(0 < s.product < 1 for s in SolutionScore.objects.all())

    model = load_prm(version.path, device="cpu", dtype=torch.float32)
    items = [("What is 4 * 6?", ["Multiply: 4 * 6 = 24.", "# Answer\n\n24"])]
    for a, b in zip(model.step_probabilities(items)[0], model.score_per_prefix(items)[0]):
        assert abs(a.p - b.p) <= 1e-5
    registry.forget_loaded()


@pytest.mark.slow
def test_the_default_model_is_a_public_prm_made_current_in_the_projects_without_one(db, settings, tmp_path):
    settings.MODELS_DIR = tmp_path
    gsm8k, math = two_projects()
    call_command("init_default_model", "--project", "gsm8k")
    version = registry.current_model(gsm8k)
    assert version.name == default_model.VERSION_NAME and version.project is None
    assert registry.current_model(math) is None
    call_command("init_default_model")  # the start script's call: every project without a current model
    assert {registry.current_model(project) for project in Project.objects.all()} == {version}
    assert ModelVersion.objects.count() == 1
