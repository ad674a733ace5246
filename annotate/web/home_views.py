"""The home pages. Outside any project: the user's projects with their queue and progress (a user
with one project goes straight to it). A project's: an annotator's progress, the open task and
what is left to label; for an admin, the button that takes the demo pool away and the processes
`./stepwise run` gave up on."""
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from annotate.labeling import queue_items, queueing, reviewing, roles
from annotate.labeling.roles import admin_required, project_of
from annotate.models import Project
from annotate.pool import demo
from infra import processes, project_paths


@require_GET
@login_required
def home(request: HttpRequest) -> HttpResponse:
    if project_paths.split(request.path)[0] is None:
        # Outside any project: the sole project's home while there is one and the user is in it
        # (an install with one campaign keeps its pages where they were), else the user's projects.
        sole = getattr(request, "project", None)
        if sole is None or not roles.is_member(request.user, sole):
            return _projects_page(request)
    project = roles.project_of(request)
    is_admin = roles.is_admin(request.user, project)
    stopped = processes.given_up() if is_admin else []
    context = {"project": project, "stopped_processes": stopped}
    if not roles.is_annotator(request.user, project):
        return render(request, "annotate/home.html", {**context, "no_role": True})
    return render(request, "annotate/home.html", {
        **context,
        "progress": reviewing.progress(annotator=request.user, project=project),
        "open_task": queueing.current_task(annotator=request.user, project=project),
        "available": queue_items.available_count(project),
        "is_reviewer": roles.is_reviewer(request.user, project),
        "removable_demo": demo.removable(project).count() if is_admin else 0,
    })


def _projects_page(request: HttpRequest) -> HttpResponse:
    """The user's projects, each with its waiting work and the user's submitted tasks; a user
    with exactly one (of several on the site) goes straight to it."""
    projects = list(Project.objects.visible_to(request.user).order_by("name"))
    if len(projects) == 1:
        return redirect(f"/p/{projects[0].slug}/")
    rows = [(project, queue_items.available_count(project), reviewing.progress(annotator=request.user, project=project))
            for project in projects]
    return render(request, "annotate/projects.html", {
        "rows": rows, "is_site_admin": roles.is_site_admin(request.user),
        "stopped_processes": processes.given_up() if roles.is_site_admin(request.user) else [],
    })


@require_POST
@admin_required
def remove_demo(request: HttpRequest) -> HttpResponse:
    removal = demo.remove(project=project_of(request))
    kept = f" Kept {removal.kept} that someone annotated." if removal.kept else ""
    # A plain `./stepwise run` seeds the demo pool again; saying so spares a puzzled admin.
    messages.success(
        request,
        f"Removed {removal.solutions} demo solution{'s' if removal.solutions != 1 else ''} "
        f"and {removal.problems} problem{'s' if removal.problems != 1 else ''}.{kept} "
        "Start with ./stepwise run --no-demo from now on, or run adds them again.",
    )
    return redirect("annotate:home")
