"""The labeling workspace. Thin: parse, call one labeling function, render.

Every page and action reaches the annotator's task through `rows.annotation_for(user=...,
project=...)`, whose every read checks the owner and the project, so nobody reaches another
person's task, or a task of another project, by id (404). The
pages are Jinja2 (annotate/web/jinja.py says why). Actions answer htmx with the task partial (a
rating with only the parts of it that it changed) and plain POSTs with a redirect; a refusal
answers with its reason, as plain text to htmx and on the task's page otherwise: 400 for input
the task does not allow, 409 for a task that changed under the page (submitted, lease lost).
"""
from collections.abc import Callable
from typing import TypeVar

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRedirect, push_url, reswap, retarget

from annotate.labeling import actions, queue_items, queueing, rows, tasks, timing
from annotate.labeling.refusals import Conflict, LabelingError
from annotate.labeling.roles import annotator_required
from annotate.labeling.rows import AnnotationRef
from annotate.labeling.tasks import Task
from annotate.models import Annotation, Project
from annotate.web.htmx import HtmxHttpRequest, is_partial
from annotate.web.params import int_param, plain_text

# The labeling pages' engine (annotate/web/jinja.py), named: a template looked up by name alone
# is first searched for, and missed, by Django's engine, which doubled the cost of rendering a
# rating's answer (0.50 -> 0.25 ms).
JINJA2 = "jinja2"

T = TypeVar("T")


class LabelRequest(HtmxHttpRequest):
    """A labeling view's request (annotations only): behind annotator_required, a signed-in user who
    is a member of the request's project."""

    user: User
    project: Project


@require_GET
@annotator_required
def label_start(request: LabelRequest) -> HttpResponse:
    """The page between tasks: resume the open one or offer the next (claiming is a POST)."""
    task = queueing.current_task(annotator=request.user, project=request.project)
    if task is not None:
        return redirect("annotate:label-task", pk=task.pk)
    available = queue_items.available_count(request.project)
    return render(request, "annotate/label_start.jinja", {"available": available}, using=JINJA2)


@require_POST
@annotator_required
def label_next(request: LabelRequest) -> HttpResponse:
    """Start labeling: the open task, else the next one from the queue, answered with its page.

    The page comes with the claim, not after a redirect: one request per task fewer (the
    page's script puts the task's own URL in the address bar; a reload without JavaScript
    posts again and resumes the same task, as claiming an open task does).
    """
    try:
        task = queueing.claim_next(annotator=request.user, project=request.project)
    except queueing.ScreeningFailed as error:
        return render(request, "annotate/label_start.jinja", {"refusal": f"No tasks: {error}."}, using=JINJA2,
                      status=403)
    if task is None:
        messages.info(request, "Nothing left to label right now. Thank you!")
        return redirect("annotate:home")
    return _task_page(request, tasks.claimed_view(task))


@require_GET
@annotator_required
@vary_on_headers("HX-Request")
def label_task(request: LabelRequest, pk: int) -> HttpResponse:
    try:
        task = tasks.task_view(rows.annotation_for(user=request.user, pk=pk, project=request.project))
    except Annotation.DoesNotExist:
        raise Http404("No such task of yours.") from None
    return _task_page(request, task, whole=not is_partial(request))


def _task_page(request: LabelRequest, task: Task, *, whole: bool = True, status: int = 200,
               error: str = "") -> HttpResponse:
    """The task (task.jinja), alone or in its page (label.jinja); `error`: why an action was refused."""
    context = {"task": task, "annotation": task.annotation, "error": error}
    if not whole:
        return render(request, "annotate/task.jinja", context, using=JINJA2, status=status)
    context["problem"] = tasks.problem_of(task)
    return render(request, "annotate/label.jinja", context, using=JINJA2, status=status)


@require_POST
@annotator_required
def label_rate(request: LabelRequest, pk: int) -> HttpResponse:
    # The hot path: the rating reads the annotation once (owner checked there) and writes once.
    return _act(request, pk, lambda a, t: actions.rate(
        annotation=a, index=int_param(request.POST, "index"), rating=int_param(request.POST, "rating"), times=t
    ))


@require_POST
@annotator_required
def label_flag(request: LabelRequest, pk: int) -> HttpResponse:
    return _act(request, pk, lambda a, t: actions.flag(
        annotation=a, index=int_param(request.POST, "index"), flagged=request.POST.get("flagged") == "1", times=t
    ))


@require_POST
@annotator_required
def label_undo(request: LabelRequest, pk: int) -> HttpResponse:
    return _act(request, pk, lambda a, t: actions.undo(annotation=a, index=int_param(request.POST, "index"), times=t))


@require_POST
@annotator_required
def label_complete(request: LabelRequest, pk: int) -> HttpResponse:
    return _act(request, pk, lambda a, t: actions.write_completion(
        annotation=a, index=int_param(request.POST, "index"), text=request.POST.get("text", ""), times=t
    ))


@require_POST
@annotator_required
def label_heartbeat(request: LabelRequest, pk: int) -> HttpResponse:
    """Activity on the page: keep the lease and store active time (rate-limited per user)."""
    if not timing.heartbeat_allowed(user_id=request.user.pk):
        return plain_text("too many heartbeats: slow down", status=429)
    annotation = rows.annotation_for(user=request.user, pk=pk, project=request.project)
    try:
        timing.record_time(annotation=annotation, times=timing.parse_times(request.POST) or timing.ActiveTime())
    except Conflict as error:
        return plain_text(str(error), status=409)
    except LabelingError as error:
        return plain_text(str(error), status=400)
    except Annotation.DoesNotExist:
        raise Http404("No such task of yours.") from None
    return HttpResponse(status=204)


@require_POST
@annotator_required
def label_submit(request: LabelRequest, pk: int) -> HttpResponse:
    """Submit, then go straight on to the next task (or home, if asked)."""
    annotation = rows.annotation_for(user=request.user, pk=pk, project=request.project)
    finish = {"finish_reason": request.POST.get("finish_reason", ""), "note": request.POST.get("note", "")}
    home = request.POST.get("then") == "home"

    def submit(a: AnnotationRef, times: timing.ActiveTime | None) -> tuple[str, Annotation | None]:
        if home:
            return actions.submit(annotation=a, times=times, **finish), None
        return actions.submit_and_claim_next(annotator=request.user, project=request.project, annotation=a,
                                             times=times, **finish)

    outcome = _perform(request, annotation, submit)
    if isinstance(outcome, HttpResponse):
        return outcome
    reason, task = outcome
    # Shown on the next page, so a submit is seen even when the next task has the same problem.
    messages.success(request, f"Submitted as {reason}.", extra_tags="toast")
    if home or task is None:
        # The page between tasks says why there is none.
        target = reverse("annotate:home" if home else "annotate:label-start")
        return HttpResponseClientRedirect(target) if request.htmx else redirect(target)
    if not request.htmx:
        return redirect("annotate:label-task", pk=task.pk)
    # htmx: the answer is the next task's page, swapped in as the whole body under its own URL
    # (static/js/label.js starts the new task): one request per task fewer than a redirect.
    page = _task_page(request, tasks.claimed_view(task))
    return push_url(retarget(reswap(page, "innerHTML"), "body"), reverse("annotate:label-task", args=[task.pk]))


def _act(request: LabelRequest, pk: int, action: Callable[..., object]) -> HttpResponse:
    """Run one labeling action and answer with the task as it now stands."""
    annotation = rows.annotation_for(user=request.user, pk=pk, project=request.project)
    outcome = _perform(request, annotation, action)
    if isinstance(outcome, HttpResponse):
        return outcome
    if not request.htmx:
        return redirect("annotate:label-task", pk=pk)
    if isinstance(outcome, Task) and outcome.changed is not None:
        # A rating (the hot path) answers with only the steps it changed, the head and the
        # submit form, each swapped in by its id; the rest of the task stays as it is.
        context = {"task": outcome, "annotation": outcome.annotation, "changed": outcome.changed}
        return reswap(render(request, "annotate/rated.jinja", context, using=JINJA2), "none")
    return _task_page(request, tasks.task_view(annotation), whole=False)


def _perform(request: LabelRequest, annotation: AnnotationRef,
             action: Callable[[AnnotationRef, timing.ActiveTime | None], T]) -> T | HttpResponse:
    """Run one labeling action: the refusal (an HttpResponse) to answer with, else what it returned."""
    try:
        try:
            return action(annotation, timing.parse_times(request.POST))
        except Conflict as error:
            return _refuse(request, annotation, 409, str(error))
        except LabelingError as error:
            return _refuse(request, annotation, 400, str(error))
    except Annotation.DoesNotExist:  # from the action, or from the page of its refusal
        raise Http404("No such task of yours.") from None


def _refuse(request: LabelRequest, annotation: AnnotationRef, status: int, message: str) -> HttpResponse:
    """htmx shows the text in the task's banner; a plain POST gets the task's page with it there."""
    if request.htmx:
        return plain_text(message, status=status)
    return _task_page(request, tasks.task_view(annotation), status=status, error=message)
