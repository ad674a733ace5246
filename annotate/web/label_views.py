"""The labeling workspace. Thin: parse, call one `labeling`/`queueing` function, render.

An annotator's task is looked up with `labeling.annotation_for(user=...)` (or, for an
action, read under the action's lock with its owner checked), so nobody reaches another
person's task by id. Labeling actions answer htmx with the task partial
(a rating with only the parts of it that it changed),
plain POSTs with a redirect, a submitted task with 409, and input the task does not allow
with 400 and the reason.
"""
from collections.abc import Callable

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRedirect, push_url, reswap, retarget

from annotate.labeling import actions as labeling
from annotate.labeling import queueing
from annotate.labeling.roles import annotator_required
from annotate.models import Annotation
from annotate.web.htmx import is_partial
from annotate.web.params import int_param, plain_text

# The engine of the workspace's hot templates (annotate/web/jinja.py), named: a template looked up
# by name alone is first searched for, and missed, by Django's engine, which doubled the cost
# of rendering a rating's answer (0.50 -> 0.25 ms).
JINJA2 = "jinja2"


@require_GET
@annotator_required
def label_start(request: HttpRequest) -> HttpResponse:
    """The page between tasks: resume the open one or offer the next (claiming is a POST)."""
    task = queueing.current_task(annotator=request.user)
    if task is not None:
        return redirect("annotate:label-task", pk=task.pk)
    return render(request, "annotate/label_start.html", {"available": queueing.available_count()})


@require_POST
@annotator_required
def label_next(request: HttpRequest) -> HttpResponse:
    """Start labeling: the open task, else the next one from the queue, answered with its page.

    The page comes with the claim, not after a redirect: one request per task fewer (the
    page's script puts the task's own URL in the address bar; a reload without JavaScript
    posts again and resumes the same task, as claiming an open task does).
    """
    try:
        task = queueing.claim_next(annotator=request.user)
    except queueing.ScreeningFailed as error:
        messages.error(request, f"No tasks: {error}.")
        return redirect("annotate:home")
    if task is None:
        messages.info(request, "Nothing left to label right now. Thank you!")
        return redirect("annotate:home")
    return _task_page(request, task, claimed=True)  # the claim's, so the user's own


@require_GET
@annotator_required
@vary_on_headers("HX-Request")
def label_task(request: HttpRequest, pk: int) -> HttpResponse:
    return _task_page(request, _own(request, pk), whole=not is_partial(request))


def _task_page(request: HttpRequest, annotation: Annotation, whole: bool = True, claimed: bool = False) -> HttpResponse:
    """The task (templates/jinja2/annotate/task.jinja), alone or in its page (annotate/label.html);
    `claimed`: the annotation is what a claim just returned."""
    task = labeling.claimed_view(annotation) if claimed else labeling.task_view(annotation)
    context = {"task": task, "annotation": annotation}
    if not whole:
        return render(request, "annotate/task.jinja", context, using=JINJA2)
    # safe: Jinja2 escaped every value in it (autoescape, annotate/web/jinja.py)
    task_html = mark_safe(render_to_string("annotate/task.jinja", context, request=request, using=JINJA2))
    return render(request, "annotate/label.html", {**context, "task_html": task_html,
                                                   "problem": labeling.problem_of(annotation)})


@require_POST
@annotator_required
def label_rate(request: HttpRequest, pk: int) -> HttpResponse:
    # The hot path: the rating reads the annotation once, under its lock (owner checked there).
    return _act(request, labeling.handle_for(user=request.user, pk=pk), lambda a, t: labeling.rate(
        annotation=a, index=int_param(request.POST, "index"), rating=int_param(request.POST, "rating"), times=t
    ))


@require_POST
@annotator_required
def label_flag(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(request, _own(request, pk), lambda a, t: labeling.flag(
        annotation=a, index=int_param(request.POST, "index"), flagged=request.POST.get("flagged") == "1", times=t
    ))


@require_POST
@annotator_required
def label_undo(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(request, _own(request, pk), lambda a, t: labeling.undo(
        annotation=a, index=int_param(request.POST, "index"), times=t
    ))


@require_POST
@annotator_required
def label_complete(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(request, _own(request, pk), lambda a, t: labeling.write_completion(
        annotation=a, index=int_param(request.POST, "index"), text=request.POST.get("text", ""), times=t
    ))


@require_POST
@annotator_required
def label_heartbeat(request: HttpRequest, pk: int) -> HttpResponse:
    """Activity on the page: keep the lease and store active time (rate-limited per user)."""
    if not labeling.heartbeat_allowed(user_id=request.user.pk):
        return plain_text("too many heartbeats: slow down", status=429)
    annotation = labeling.handle_for(user=request.user, pk=pk)
    try:
        labeling.record_time(annotation=annotation, times=labeling.parse_times(request.POST) or labeling.ActiveTime())
    except (labeling.AlreadySubmitted, queueing.LeaseLost) as error:
        return plain_text(str(error), status=409)
    except labeling.LabelingError as error:
        return plain_text(str(error), status=400)
    except Annotation.DoesNotExist:
        raise Http404("No such task of yours.") from None
    return HttpResponse(status=204)


@require_POST
@annotator_required
def label_submit(request: HttpRequest, pk: int) -> HttpResponse:
    """Submit, then go straight on to the next task (or home, if asked)."""
    annotation = labeling.handle_for(user=request.user, pk=pk)
    finish = {"finish_reason": request.POST.get("finish_reason", ""), "note": request.POST.get("note", "")}
    home = request.POST.get("then") == "home"

    def submit(a: Annotation, times: labeling.ActiveTime | None) -> tuple[str, Annotation | None]:
        if home:
            return labeling.submit(annotation=a, times=times, **finish), None
        return labeling.submit_and_claim_next(annotator=request.user, annotation=a, times=times, **finish)

    outcome = _perform(request, annotation, submit)
    if isinstance(outcome, HttpResponse):
        return outcome
    _, task = outcome
    # Shown on the next page, so a submit is seen even when the next task has the same problem.
    messages.success(request, f"Submitted as {annotation.finish_reason}.", extra_tags="toast")
    if home:
        target = reverse("annotate:home")
        return HttpResponseClientRedirect(target) if request.htmx else redirect(target)
    if task is None:
        target = reverse("annotate:label-start")  # The page between tasks says why there is none.
        return HttpResponseClientRedirect(target) if request.htmx else redirect(target)
    if not request.htmx:
        return redirect("annotate:label-task", pk=task.pk)
    # htmx: the answer is the next task's page, swapped in as the whole body under its own URL
    # (static/js/label.js starts the new task): one request per task fewer than a redirect.
    page = _task_page(request, task, claimed=True)  # the claim's, so the user's own
    return push_url(retarget(reswap(page, "innerHTML"), "body"), reverse("annotate:label-task", args=[task.pk]))


def _own(request: HttpRequest, pk: int) -> Annotation:
    try:
        return labeling.annotation_for(user=request.user, pk=pk)
    except Annotation.DoesNotExist:
        raise Http404("No such task of yours.") from None


def _act(request: HttpRequest, annotation: Annotation, action: Callable[..., object]) -> HttpResponse:
    """Run one labeling action and answer with the task as it now stands."""
    outcome = _perform(request, annotation, action)
    if isinstance(outcome, HttpResponse):
        return outcome
    if request.htmx:
        if isinstance(outcome, labeling.Task) and outcome.changed is not None:
            # A rating (the hot path) answers with only the steps it changed, the head and the
            # submit form, each swapped in by its id; the rest of the task stays as it is.
            context = {"task": outcome, "annotation": outcome.annotation, "changed": outcome.changed}
            return reswap(render(request, "annotate/rated.jinja", context, using=JINJA2), "none")
        task = labeling.task_view(annotation if annotation.solution_id else _own(request, annotation.pk))
        return render(request, "annotate/task.jinja", {"task": task, "annotation": task.annotation}, using=JINJA2)
    return redirect("annotate:label-task", pk=annotation.pk)


def _perform(request: HttpRequest, annotation: Annotation, action: Callable[..., object]) -> object:
    """Run one labeling action: the refusal (an HttpResponse) to answer with, else what it returned."""
    try:
        return action(annotation, labeling.parse_times(request.POST))
    except (labeling.AlreadySubmitted, queueing.LeaseLost) as error:
        return _refuse(request, annotation, 409, str(error))
    except labeling.LabelingError as error:
        return _refuse(request, annotation, 400, str(error))
    except Annotation.DoesNotExist:
        raise Http404("No such task of yours.") from None


def _refuse(request: HttpRequest, annotation: Annotation, status: int, message: str) -> HttpResponse:
    # htmx shows the text; a plain POST after submit gets its 409 too.
    if request.htmx or status == 409:
        return plain_text(message, status=status)
    messages.error(request, message)
    return redirect("annotate:label-task", pk=annotation.pk)

