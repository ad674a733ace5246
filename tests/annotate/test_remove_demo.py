"""`remove_demo` takes the demo pool away but for the solutions someone has labeled."""
import io

import pytest
from django.core.management import call_command

from annotate.models import Annotation, Problem, Solution
from scoring.models import ModelVersion, StepScore
from tests.factories import SolutionFactory, UserFactory


@pytest.mark.django_db
def test_remove_demo_keeps_labeled_solutions_their_problems_and_every_other_pool():
    call_command("seed_demo", problems=6, stdout=io.StringIO())
    demo = Solution.objects.filter(source="demo").select_related("problem").order_by("pk")
    labeled = demo.first()
    drafted = demo.exclude(problem=labeled.problem).first()
    Annotation.objects.create(solution=labeled, annotator=UserFactory(), labeler="a", status="submitted")
    # A label being written counts too: it is someone's work.
    Annotation.objects.create(solution=drafted, annotator=UserFactory(), labeler="b")
    version = ModelVersion.objects.create(name="v", path="x", weights_sha256="0" * 64)
    scored = demo.exclude(pk__in=[labeled.pk, drafted.pk]).first()
    StepScore.objects.create(step=scored.steps.first(), model_version=version, p=0.5)
    imported = SolutionFactory()

    out = io.StringIO()
    call_command("remove_demo", stdout=out)

    assert set(Solution.objects.all()) == {labeled, drafted, imported}
    assert set(Problem.objects.filter(source="demo")) == {labeled.problem, drafted.problem}
    assert not StepScore.objects.exists()
    assert out.getvalue().startswith("Demo pool: removed ") and "kept 2 labeled" in out.getvalue()
    assert "--no-demo" in out.getvalue()
