"""The quality page: each annotator's progress and agreement, and resetting a screening."""
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from annotate.labeling import quality, reviewing, roles
from annotate.labeling.roles import admin_required, project_of, reviewer_required
from annotate.models import LabelingConfig


@require_GET
@reviewer_required
def quality_report(request: HttpRequest) -> HttpResponse:
    project = project_of(request)
    people = (get_user_model().objects.filter(annotations__project=project, annotations__annotator__isnull=False)
              .distinct().order_by("username"))
    rows = [
        (person, reviewing.progress(annotator=person, project=project),
         quality.inter_annotator(project=project, annotator=person)) for person in people
    ]
    return render(request, "annotate/quality.html", {
        "rows": rows, "overall": quality.inter_annotator(project=project), "config": LabelingConfig.of(project),
        "is_admin": roles.is_admin(request.user, project),
    })


@require_POST
@admin_required
def quality_reset_screening(request: HttpRequest, user_id: int) -> HttpResponse:
    person = get_object_or_404(get_user_model(), pk=user_id, memberships__project=project_of(request))
    quality.reset_screening(annotator=person, project=project_of(request))
    messages.success(request, f"{person.get_username()} can take the screening set again.")
    return redirect("annotate:quality")
