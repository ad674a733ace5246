"""The home page: an annotator's progress, the open task and what is left to label."""
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from annotate.labeling import queueing, reviewing, roles


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
