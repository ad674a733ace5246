"""The sources page: how far people, rollouts, a judge and the PRM agree over the project's pool.

A reviewer's page, beside Review and Quality: the figures say which source to trust where, and
the solutions listed are those worth a person's look. Computed when asked
(`scoring.rescoring.source_agreement`, bounded in the solutions it reads).
"""
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from annotate.labeling.roles import project_of, reviewer_required
from annotate.labeling.sources import PRM_THRESHOLD, SOURCES
from scoring.rescoring import source_agreement
from steps.agreement import POSITION_BUCKETS


@require_GET
@reviewer_required
def sources(request: HttpRequest) -> HttpResponse:
    return render(request, "scoring/sources.html", {
        "agreement": source_agreement.pool_agreement(project=project_of(request), limit=source_agreement.MAX_SOLUTIONS),
        "limit": source_agreement.MAX_SOLUTIONS, "buckets": POSITION_BUCKETS, "sources": SOURCES,
        "prm_threshold": PRM_THRESHOLD,
    })
