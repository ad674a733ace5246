"""Annotator and reviewer pages. Thin: parse, call one stage function, render.

Every page needs a login and a role; an annotator's task is looked up with
`labeling.annotation_for(user=...)`, so nobody reaches another person's task by id.
Labeling actions answer htmx with the task partial, plain POSTs with a redirect, a
submitted task with 409, and input the task does not allow with 400 and the reason.
"""
from collections.abc import Callable
from functools import wraps

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRedirect

from annotate import labeling, quality, queueing, reviewing, roles
from annotate.htmx import page_or_partial
from annotate.models import Annotation, LabelingConfig

View = Callable[..., HttpResponse]


def role_required(role: str) -> Callable[[View], View]:
    """Login first; then 403 (not a login loop) for users without the role."""

    def decorator(view: View) -> View:
        @login_required
        @wraps(view)
        def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if not roles.has_role(request.user, role):
                raise PermissionDenied(f"This page is for the {role} role.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


annotator_required = role_required(roles.ANNOTATOR)
reviewer_required = role_required(roles.REVIEWER)
admin_required = role_required(roles.ADMIN)


def _int(data, name: str, *, optional: bool = False) -> int | None:
    value = data.get(name, "")
    if value in ("", None) and optional:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise labeling.LabelingError(f"{name} must be a whole number, not {value!r}") from None


# --- annotator ---------------------------------------------------------------------


@require_GET
@login_required
def home(request: HttpRequest) -> HttpResponse:
    if not roles.is_annotator(request.user):
        return render(request, "annotate/home.html", {"no_role": True})
    return render(request, "annotate/home.html", {
        "progress": reviewing.progress(annotator=request.user),
        "open_task": queueing.current_task(annotator=request.user),
        "available": queueing.available_count(),
        "is_reviewer": roles.is_reviewer(request.user),
    })


@require_POST
@annotator_required
def label_next(request: HttpRequest) -> HttpResponse:
    """Start labeling: the open task, else the next one from the queue."""
    try:
        task = queueing.claim_next(annotator=request.user)
    except queueing.ScreeningFailed as error:
        messages.error(request, f"No tasks: {error}.")
        return redirect("home")
    if task is None:
        messages.info(request, "Nothing left to label right now. Thank you!")
        return redirect("home")
    return redirect("label-task", pk=task.pk)


@require_GET
@annotator_required
@vary_on_headers("HX-Request")
def label_task(request: HttpRequest, pk: int) -> HttpResponse:
    annotation = _own(request, pk)
    task = labeling.task_view(annotation)
    template = page_or_partial(request, "annotate/label.html", "task")
    return render(request, template, {"task": task, "annotation": annotation, "problem": annotation.solution.problem})


def _own(request: HttpRequest, pk: int) -> Annotation:
    try:
        return labeling.annotation_for(user=request.user, pk=pk)
    except Annotation.DoesNotExist:
        raise Http404("No such task of yours.") from None


def _perform(request: HttpRequest, annotation: Annotation, action: Callable[..., object]) -> HttpResponse | None:
    """Run one labeling action; the refusal to answer with, or None when it was done."""
    try:
        action(annotation, labeling.parse_times(request.POST))
    except (labeling.AlreadySubmitted, queueing.LeaseLost) as error:
        return _refuse(request, annotation, 409, str(error))
    except labeling.LabelingError as error:
        return _refuse(request, annotation, 400, str(error))
    return None


def _act(request: HttpRequest, pk: int, action: Callable[..., object]) -> HttpResponse:
    """Run one labeling action and answer with the task as it now stands."""
    annotation = _own(request, pk)
    if refusal := _perform(request, annotation, action):
        return refusal
    if request.htmx:
        return render(request, "annotate/label.html#task", {"task": labeling.task_view(annotation), "annotation": annotation})
    return redirect("label-task", pk=pk)


def _refuse(request: HttpRequest, annotation: Annotation, status: int, message: str) -> HttpResponse:
    # htmx shows the text; a plain POST after submit gets its 409 too.
    if request.htmx or status == 409:
        return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")
    messages.error(request, message)
    return redirect("label-task", pk=annotation.pk)


@require_POST
@annotator_required
def label_rate(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(request, pk, lambda a, t: labeling.rate(
        annotation=a, index=_int(request.POST, "index"), rating=_int(request.POST, "rating"), times=t
    ))


@require_POST
@annotator_required
def label_flag(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(request, pk, lambda a, t: labeling.flag(
        annotation=a, index=_int(request.POST, "index"), flagged=request.POST.get("flagged") == "1", times=t
    ))


@require_POST
@annotator_required
def label_undo(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(request, pk, lambda a, t: labeling.undo(annotation=a, index=_int(request.POST, "index"), times=t))


@require_POST
@annotator_required
def label_complete(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(request, pk, lambda a, t: labeling.write_completion(
        annotation=a, index=_int(request.POST, "index"), text=request.POST.get("text", ""), times=t
    ))


@require_POST
@annotator_required
def label_heartbeat(request: HttpRequest, pk: int) -> HttpResponse:
    """Activity on the page: keep the lease and store active time."""
    annotation = _own(request, pk)
    try:
        labeling.record_time(annotation=annotation, times=labeling.parse_times(request.POST) or labeling.ActiveTime())
    except (labeling.AlreadySubmitted, queueing.LeaseLost) as error:
        return HttpResponse(str(error), status=409, content_type="text/plain; charset=utf-8")
    except labeling.LabelingError as error:
        return HttpResponse(str(error), status=400, content_type="text/plain; charset=utf-8")
    return HttpResponse(status=204)


@require_POST
@annotator_required
def label_submit(request: HttpRequest, pk: int) -> HttpResponse:
    """Submit, then go straight on to the next task (or home, if asked)."""
    annotation = _own(request, pk)
    refusal = _perform(request, annotation, lambda a, t: labeling.submit(
        annotation=a, finish_reason=request.POST.get("finish_reason", ""), note=request.POST.get("note", ""), times=t
    ))
    if refusal:
        return refusal
    target = reverse("home") if request.POST.get("then") == "home" else _next_task_url(request)
    return HttpResponseClientRedirect(target) if request.htmx else redirect(target)


def _next_task_url(request: HttpRequest) -> str:
    """Straight on to the next task; the page between tasks says why when there is none."""
    try:
        task = queueing.claim_next(annotator=request.user)
    except queueing.ScreeningFailed:
        task = None
    return reverse("label-task", args=[task.pk]) if task else reverse("label-start")


@require_GET
@annotator_required
def label_start(request: HttpRequest) -> HttpResponse:
    """The page between tasks: resume the open one or offer the next (claiming is a POST)."""
    task = queueing.current_task(annotator=request.user)
    if task is not None:
        return redirect("label-task", pk=task.pk)
    return render(request, "annotate/label_start.html", {"available": queueing.available_count()})


# --- reviewer ----------------------------------------------------------------------


@require_GET
@reviewer_required
def review_list(request: HttpRequest) -> HttpResponse:
    try:
        annotator_id = _int(request.GET, "annotator", optional=True)
        generation = _int(request.GET, "generation", optional=True)
    except labeling.LabelingError as error:
        return HttpResponse(str(error), status=400, content_type="text/plain; charset=utf-8")
    annotations = reviewing.annotations_for_review(
        annotator_id=annotator_id, generation=generation, disagreement=request.GET.get("disagreement") == "1"
    )
    page = Paginator(annotations, 50).get_page(request.GET.get("page"))
    return render(request, "annotate/review_list.html", {
        "page": page,
        "annotators": get_user_model().objects.filter(annotations__isnull=False).distinct().order_by("username"),
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
    annotation = get_object_or_404(
        Annotation.objects.select_related("solution__problem", "annotator"), pk=pk, status=Annotation.Status.SUBMITTED
    )
    others = list(
        Annotation.objects.filter(solution=annotation.solution, status=Annotation.Status.SUBMITTED)
        .exclude(pk=annotation.pk).select_related("annotator").order_by("pk")
    )
    return render(request, "annotate/review_detail.html", {
        "annotation": annotation, "others": others, "problem": annotation.solution.problem,
        "rows": reviewing.review_rows(annotation=annotation, others=others),
        "is_admin": roles.is_admin(request.user),
    })


@require_POST
@reviewer_required
def review_override(request: HttpRequest, pk: int) -> HttpResponse:
    annotation = get_object_or_404(Annotation, pk=pk, status=Annotation.Status.SUBMITTED)
    try:
        reviewing.override_rating(
            annotation=annotation, index=_int(request.POST, "index"), rating=_int(request.POST, "rating", optional=True),
            reviewer=request.user, note=request.POST.get("note", ""),
        )
    except labeling.LabelingError as error:
        messages.error(request, str(error))
    else:
        messages.success(request, "Rating overridden; the old value is kept in the history.")
    return redirect("review-detail", pk=pk)


@require_POST
@admin_required
def review_make_gold(request: HttpRequest, pk: int) -> HttpResponse:
    annotation = get_object_or_404(Annotation, pk=pk, status=Annotation.Status.SUBMITTED)
    quality.make_gold(annotation=annotation)
    messages.success(request, "This solution is now a gold item with these ratings.")
    return redirect("review-detail", pk=pk)


@require_POST
@admin_required
def review_add_to_screening(request: HttpRequest, pk: int) -> HttpResponse:
    annotation = get_object_or_404(Annotation, pk=pk, status=Annotation.Status.SUBMITTED)
    if not annotation.solution.is_gold:
        messages.error(request, "Make the solution gold first: screening is graded against gold labels.")
    else:
        quality.add_to_screening(solution=annotation.solution)
        messages.success(request, "Added to the screening set: every annotator labels it before real tasks.")
    return redirect("review-detail", pk=pk)


@require_GET
@reviewer_required
def quality_report(request: HttpRequest) -> HttpResponse:
    people = get_user_model().objects.filter(annotations__annotator__isnull=False).distinct().order_by("username")
    rows = [(person, reviewing.progress(annotator=person), quality.inter_annotator(annotator=person)) for person in people]
    return render(request, "annotate/quality.html", {
        "rows": rows, "overall": quality.inter_annotator(), "config": LabelingConfig.get(),
        "is_admin": roles.is_admin(request.user),
    })


@require_POST
@admin_required
def quality_reset_screening(request: HttpRequest, user_id: int) -> HttpResponse:
    person = get_object_or_404(get_user_model(), pk=user_id)
    quality.reset_screening(annotator=person)
    messages.success(request, f"{person.get_username()} can take the screening set again.")
    return redirect("quality")
