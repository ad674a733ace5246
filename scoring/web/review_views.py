"""The PRM's view of a solution under review: scoring's partial on annotate's review page.

The review page (annotate) loads this with htmx, so the labeling side never reads scoring's
tables; opened directly (no JavaScript), it is a page of its own.
"""
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from annotate.labeling.roles import project_of, reviewer_required
from annotate.models import Solution
from annotate.web.htmx import page_or_partial
from scoring.models import SolutionScore, StepScore
from scoring.store import registry


@require_GET
@reviewer_required
@vary_on_headers("HX-Request")
def review_scores(request: HttpRequest, solution_id: int) -> HttpResponse:
    """The project's current model's score of every step of one of its solutions, and its
    solution-level scores."""
    project = project_of(request)
    solution = get_object_or_404(Solution.objects.select_related("problem"), pk=solution_id, project=project)
    version = registry.current_model(project)
    score = SolutionScore.objects.filter(solution=solution, model_version=version).first() if version else None
    p_by_index = dict(
        StepScore.objects.filter(step__solution=solution, model_version=version).values_list("step__index", "p")
    ) if score else {}
    steps = [(step, p_by_index.get(step.index)) for step in solution.steps.order_by("index")]
    return render(request, page_or_partial(request, "scoring/review_scores.html", "scores"), {
        "solution": solution, "version": version, "score": score, "steps": steps,
    })
