"""Reviewer pages: submitted annotations, one annotation beside the others, overrides,
and the admin's gold and screening buttons. A refused change answers 400 with the annotation's
page and the reason on it; a change made redirects to that page."""
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from annotate.labeling import quality, queueing, reviewing, roles
from annotate.labeling.refusals import LabelingError
from annotate.labeling.roles import admin_required, project_of, reviewer_required
from annotate.models import Annotation
from annotate.templatetags import workspace
from annotate.web.params import int_param, plain_text


@require_GET
@reviewer_required
def review_list(request: HttpRequest) -> HttpResponse:
    try:
        annotator_id = int_param(request.GET, "annotator", optional=True)
        generation = int_param(request.GET, "generation", optional=True)
    except LabelingError as error:
        return plain_text(str(error), status=400)
    annotations = reviewing.annotations_for_review(
        project=project_of(request), annotator_id=annotator_id, generation=generation,
        disagreement=request.GET.get("disagreement") == "1",
        contradiction=request.GET.get("contradiction") == "1",
    )
    page = Paginator(annotations, 50).get_page(request.GET.get("page"))
    return render(request, "annotate/review_list.html", {
        "page": page,
        "annotators": (get_user_model().objects.filter(annotations__project=project_of(request)).distinct()
                       .order_by("username")),
        "filters": request.GET,
        "querystring": _without_page(request),
    })


def _without_page(request: HttpRequest) -> str:
    params = request.GET.copy()
    params.pop("page", None)
    return params.urlencode()


@require_GET
@reviewer_required
def review_detail(request: HttpRequest, pk: int) -> HttpResponse:
    return _detail_page(request, pk)


def _detail_page(request: HttpRequest, pk: int, *, status: int = 200) -> HttpResponse:
    annotation = get_object_or_404(
        Annotation.objects.submitted().filter(project=project_of(request))
        .select_related("solution__problem", "annotator"),
        pk=pk,
    )
    others = list(
        Annotation.objects.submitted().filter(solution=annotation.solution)
        .exclude(pk=annotation.pk).select_related("annotator").order_by("pk")
    )
    rows = reviewing.review_rows(annotation=annotation, others=others)
    return render(request, "annotate/review_detail.html", {
        "annotation": annotation, "others": others, "problem": annotation.solution.problem, "rows": rows,
        "review_reasons": [reviewing.REVIEW_REASONS[r] for r in reviewing.review_reasons(annotation)],
        "flagged_steps": [row.index + 1 for row in rows if row.cells and row.cells[0].flagged],
        "is_admin": roles.is_admin(request.user, project_of(request)), "rating_buttons": workspace.RATING_BUTTONS,
    }, status=status)


def _refuse(request: HttpRequest, pk: int, message: str) -> HttpResponse:
    """A refused change: 400, the annotation's page with the reason among its messages."""
    messages.error(request, message)
    return _detail_page(request, pk, status=400)


@require_POST
@reviewer_required
def review_override(request: HttpRequest, pk: int) -> HttpResponse:
    annotation = _submitted(project_of(request), pk)
    try:
        index = int_param(request.POST, "index")
        override = reviewing.override_rating(
            annotation=annotation, index=index,
            rating=int_param(request.POST, "rating", optional=True), reviewer=request.user,
            note=request.POST.get("note", ""),
        )
    except LabelingError as error:
        return _refuse(request, pk, str(error))
    annotation.refresh_from_db(fields=["finish_reason"])
    messages.success(request, "Rating overridden; the old value is kept in the history." + (
        f" Finished as {annotation.finish_reason} now." if "(finish reason" in override.note else ""))
    return redirect("annotate:review-detail", pk=pk)


@require_POST
@admin_required
def review_make_gold(request: HttpRequest, pk: int) -> HttpResponse:
    quality.make_gold(annotation=_submitted(project_of(request), pk))
    messages.success(request, "This solution is now a gold item with these ratings.")
    return redirect("annotate:review-detail", pk=pk)


@require_POST
@admin_required
def review_add_to_screening(request: HttpRequest, pk: int) -> HttpResponse:
    annotation = _submitted(project_of(request), pk)
    if not annotation.solution.is_gold:
        return _refuse(request, pk, "Make the solution gold first: screening is graded against gold labels.")
    queueing.add_to_screening(solution=annotation.solution)
    messages.success(request, "Added to the screening set: every annotator labels it before real tasks.")
    return redirect("annotate:review-detail", pk=pk)


def _submitted(project, pk: int) -> Annotation:
    """The one way these pages reach an annotation: the project's submitted ones only, 404 otherwise."""
    return get_object_or_404(Annotation.objects.submitted().filter(project=project), pk=pk)
