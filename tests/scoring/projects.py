"""Two projects side by side, and pool rows in a named one (with several projects, a row that names
none is refused: its `project` default asks for the sole project)."""
from annotate.models import Project
from tests.factories import ProblemFactory, SolutionFactory


def two_projects() -> tuple[Project, Project]:
    return (Project.objects.create(slug="gsm8k", name="GSM8K"), Project.objects.create(slug="math", name="MATH"))


def solution_in(project: Project, **fields):
    """A solution of a new problem, both in `project`."""
    return SolutionFactory(problem=ProblemFactory(project=project), project=project, **fields)
