"""The home page: an annotator's progress, the open task and what is left to label; for an
admin, the button that takes the demo pool away and the processes `./stepwise run` gave up on."""
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from annotate.labeling import queueing, reviewing, roles
from annotate.labeling.roles import admin_required
from annotate.pool import demo
from infra import processes


@require_GET
@login_required
def home(request: HttpRequest) -> HttpResponse:
    stopped = processes.given_up() if roles.is_admin(request.user) else []
    if not roles.is_annotator(request.user):
        return render(request, "annotate/home.html", {"no_role": True, "stopped_processes": stopped})
    return render(request, "annotate/home.html", {
        "stopped_processes": stopped,
        "progress": reviewing.progress(annotator=request.user),
        "open_task": queueing.current_task(annotator=request.user),
        "available": queueing.available_count(),
        "is_reviewer": roles.is_reviewer(request.user),
        "removable_demo": demo.removable().count() if roles.is_admin(request.user) else 0,
    })


@require_POST
@admin_required
def remove_demo(request: HttpRequest) -> HttpResponse:
    removal = demo.remove()
    kept = f" Kept {removal.kept} that someone annotated." if removal.kept else ""
    # A plain `./stepwise run` seeds the demo pool again; saying so spares a puzzled admin.
    messages.success(
        request,
        f"Removed {removal.solutions} demo solution{'s' if removal.solutions != 1 else ''} "
        f"and {removal.problems} problem{'s' if removal.problems != 1 else ''}.{kept} "
        "Start with ./stepwise run --no-demo from now on, or run adds them again.",
    )
    return redirect("annotate:home")
