"""factory_boy factories for the pool and users."""
import factory
from django.contrib.auth import get_user_model

from annotate.models import Problem, Solution, Step
from annotate.models.pool import content_hash


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"annotator{n}")
    password = factory.PostGenerationMethodCall("set_password", "pass-for-tests")


class ProblemFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Problem

    statement = factory.Sequence(lambda n: f"What is {n} + {n}?")
    ground_truth_answer = factory.LazyAttributeSequence(lambda o, n: str(2 * n))
    source = "tests"
    content_hash = factory.LazyAttribute(lambda o: Problem.hash_for(o.statement, o.ground_truth_answer))


class SolutionFactory(factory.django.DjangoModelFactory):
    """A solution; pass `steps=[...]` to choose its step texts."""

    class Meta:
        model = Solution

    problem = factory.SubFactory(ProblemFactory)
    final_answer = "2"
    is_correct = True
    source = "tests"
    content_hash = factory.Sequence(lambda n: content_hash("solution", n))

    @factory.post_generation
    def steps(obj, create, extracted, **kwargs):
        texts = extracted if extracted is not None else ["First step.", "Second step.", "# Answer\n\n2"]
        if create:
            Step.objects.bulk_create(Step(solution=obj, index=i, text=text) for i, text in enumerate(texts))


def user_with_role(username: str, role: str, project=None, **fields):
    """A user in one of the roles of annotate.labeling.roles (annotator, reviewer, admin), in `project`
    (the sole one when None). A superuser is a site admin: every role in every project, no membership."""
    from annotate.labeling.roles import grant_role

    user = UserFactory(username=username, **fields)
    if not user.is_superuser:
        grant_role(user, role, project)
    return user


def store_step_scores(version, solution, ps: list[float]) -> None:
    """`version`'s P(step right) for each step of `solution`, stored as rescoring stores them."""
    from scoring.core.step_scores import StepProbability
    from scoring.rescoring import scores

    step_ids = list(solution.steps.order_by("index").values_list("pk", flat=True))
    scores.write_scores(model_version=version, solution_ids=[solution.pk], step_ids=[step_ids],
                        results=[[StepProbability(p) for p in ps]])


def scored_by_current_model(solution, ps: list[float]) -> None:
    """The scores of the current model of the solution's project for each step of `solution` (a
    current version is made when the project has none)."""
    from scoring.models import ModelVersion
    from scoring.store import registry

    version = registry.current_model(solution.project_id)
    if version is None:
        version = ModelVersion.objects.create(name=f"current-{solution.project_id}", path="/x", weights_sha256="0" * 64,
                                              project_id=solution.project_id)
        registry.set_current_model(version, project=solution.project)
    store_step_scores(version, solution, ps)
