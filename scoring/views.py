"""Model pages: versions with a Rescore button, a rescore job's live progress, and the queue.

Thin views: parse, one call into scoring.scoring / a query, render. The job page
(`jobs/rescore/<pk>/`) polls itself with htmx while the job runs and answers with its
`progress` partial, the one job progress partial; without JavaScript it is a plain page.
"""
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST
from django.views.decorators.vary import vary_on_headers

from annotate import roles
from annotate.htmx import page_or_partial
from annotate.models import Generation, QueueItem
from annotate.roles import admin_required as admin_only

from . import scoring
from .models import ModelVersion, RescoreJob


@login_required
def model_list(request: HttpRequest) -> HttpResponse:
    if not roles.is_reviewer(request.user):
        raise PermissionDenied("Models are for reviewers and admins.")
    versions = ModelVersion.objects.select_related("parent")
    jobs = RescoreJob.objects.select_related("model_version")[:20]
    return render(request, "scoring/model_list.html", {"versions": versions, "jobs": jobs,
                                                       "can_rescore": roles.is_admin(request.user)})


@require_POST
@admin_only
def rescore(request: HttpRequest, version_id: int) -> HttpResponse:
    # Only records the job: the ml worker verifies and loads the model (no torch here).
    job = scoring.start_rescore(model_version=get_object_or_404(ModelVersion, pk=version_id), created_by=request.user)
    return redirect("scoring:rescore-job", pk=job.pk)


@login_required
@vary_on_headers("HX-Request")
def rescore_job(request: HttpRequest, pk: int) -> HttpResponse:
    if not roles.is_reviewer(request.user):
        raise PermissionDenied("Rescore jobs are for reviewers and admins.")
    job = get_object_or_404(RescoreJob.objects.select_related("model_version"), pk=pk)
    return render(request, page_or_partial(request, "scoring/rescore_job.html", "progress"), {"job": job})


@login_required
def queue(request: HttpRequest) -> HttpResponse:
    if not roles.is_reviewer(request.user):
        raise PermissionDenied("The queue is for reviewers and admins.")
    generation = request.GET.get("generation", "")
    number = int(generation) if generation.lstrip("-").isdigit() else Generation.objects.current_number()
    items = (
        QueueItem.objects.filter(generation=number, status__in=[QueueItem.Status.AVAILABLE, QueueItem.Status.LEASED])
        .select_related("solution__problem").order_by("-priority", "id")
    )
    page = Paginator(items, 50).get_page(request.GET.get("page"))
    generations = Generation.objects.filter(number__gte=0)
    return render(request, "scoring/queue.html", {"page": page, "number": number, "generations": generations})
