"""Model pages: versions with a Rescore button, a rescore job's live progress, and the queue.

A version that is not the current one (a candidate, a rejected or retired model) is rescored
only after a confirmation page that says the queue will be rebuilt from its scores; a
running rescore can be cancelled from its page, which shows tokens/s and an ETA.

Everything is the request's project's (`project_of(request)`): the models page shows the versions it
may use (`ModelVersion.objects.usable_in`: its lineage, the versions trained in it and its current
model wherever that came from, and the public PRMs it could make current), its jobs and its queue;
an object of another project answers 404.

Thin views: parse, one call into scoring.rescoring.rescore / a query, render. The job page
(`jobs/rescore/<pk>/`) polls itself with htmx while the job runs and answers with its
`progress` partial, the one job progress partial; without JavaScript it is a plain page.
"""
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import F
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.views.decorators.http import require_POST
from django.views.decorators.vary import vary_on_headers

from annotate.labeling import roles
from annotate.labeling.roles import project_of
from annotate.models import Generation, QueueItem
from annotate.web.htmx import page_or_partial

# From the torch-free folder format, not checkpoint_export: the web process never imports torch.
from scoring.core.model_files import EXPORT_KINDS
from scoring.models import ModelVersion, RescoreJob
from scoring.rescoring import rescore as scoring
from scoring.store import model_exports, registry
from scoring.tasks import export_model_task
from scoring.web import search_report
from scoring.web.charts import dotted


@roles.reviewer_required
def model_list(request: HttpRequest) -> HttpResponse:
    # The current version first: the one the queue follows is the one to look at.
    versions = list(ModelVersion.objects.usable_in(project_of(request)).with_current(project_of(request))
                    .select_related("parent").prefetch_related("training_runs")
                    .order_by(F("is_current").desc(), "-created_at"))
    jobs = RescoreJob.objects.filter(project=project_of(request)).select_related("model_version")[:20]
    for version in versions:  # only admins see (and may build) exports
        is_head = version.kind == ModelVersion.Kind.HEAD
        # Attributes for the template only, not model fields.
        version.export_links = (  # type: ignore[attr-defined]
            _export_links(version) if is_head and roles.is_admin(request.user) else []
        )
        version.held_out = held_out_facts(version.metrics or {})  # type: ignore[attr-defined]
        version.trained_on = trained_on(version)  # type: ignore[attr-defined]
    report = search_report.latest()
    return render(request, "scoring/model_list.html", {
        "versions": versions, "jobs": jobs, "can_rescore": roles.is_admin(request.user),
        "search_report": report, "search_chart": search_report.chart(report) if report else "",
    })


def held_out_facts(metrics: dict) -> list[str]:
    """A version's held-out metrics in words, each with the number of items it was measured on."""
    measured = metrics.get("eval")
    if not measured:
        return []
    bench = measured.get("processbench") or {}
    solutions = (bench.get("n_erroneous") or 0) + (bench.get("n_correct") or 0)
    facts = [
        f"step AUC {_value(measured.get('step_auc'))} on {measured.get('n_steps', 0)} labeled steps "
        f"of {solutions} solutions",
        f"first-error F1 {_value(bench.get('f1'))} on {solutions} solutions",
    ]
    by_n = dotted(measured, "best_of_n.by_n") or {}
    if by_n:  # the largest N measured, candidates ranked by P(all steps good) as selection does
        n = max(by_n, key=int)
        problems = by_n[n].get("problems", 0)
        facts.append(f"best-of-{n} accuracy {_value(by_n[n].get('product'))} on {problems} "
                     f"problem{pluralize(problems)}")
    return facts


def _value(value: float | None) -> str:
    return "not measurable" if value is None else f"{value:.3f}"


def trained_on(version: ModelVersion) -> str:
    """What the version learned from (labels, queue generation) and what it is (head, backbone)."""
    facts = (version.metrics or {}).get("trained_on")
    if facts:
        return (f"{facts['solutions']} labeled solutions ({facts['step_labels']} step labels, {facts['labels']}) "
                f"up to generation {facts['generation']}; {facts['head']} head ({facts['mode']}) "
                f"on {facts['backbone']}")
    head = (version.config.get("head") or {}).get("type")
    backbone = str(version.config.get("backbone") or "").rstrip("/").rsplit("/", 1)[-1]
    runs = list(version.training_runs.all())
    what = f"{runs[0].n_labels} labels" if runs else "not trained here"
    return f"{what}; {head or '—'} head on {backbone or '—'}"


def _export_links(version: ModelVersion) -> list[tuple[str, bool]]:
    """(export kind, whether its archive is built) for the models page's download column."""
    return [(kind, model_exports.finished_archive(version, kind) is not None) for kind in EXPORT_KINDS]


@require_POST
@roles.admin_required
def export_model(request: HttpRequest, version_id: int) -> HttpResponse:
    """Start building a version's standard-checkpoint archive on the ml worker (once)."""
    version = get_object_or_404(ModelVersion.objects.usable_in(project_of(request)), pk=version_id)
    as_kind = request.POST.get("as", "")
    if as_kind not in EXPORT_KINDS:
        return HttpResponse(f"'as' must be one of {', '.join(EXPORT_KINDS)}", status=400)
    if model_exports.finished_archive(version, as_kind) is None:
        export_model_task.delay_on_commit(version.pk, as_kind)
        messages.info(request, f"Building the {as_kind} checkpoint of {version.name} on the ml worker; "
                               "reload this page for its download link.")
    return redirect("scoring:models")


@roles.admin_required
def download_model(request: HttpRequest, version_id: int, as_kind: str) -> FileResponse:
    """The built archive; nothing before it is complete, nothing outside the exports folder."""
    version = get_object_or_404(ModelVersion.objects.usable_in(project_of(request)), pk=version_id)
    path = model_exports.finished_archive(version, as_kind) if as_kind in EXPORT_KINDS else None
    if path is None:
        raise Http404("This export is not built yet.")
    return FileResponse(path.open("rb"), as_attachment=True, filename=path.name, content_type="application/zip")


@require_POST
@roles.admin_required
def rescore(request: HttpRequest, version_id: int) -> HttpResponse:
    """Record a rescore of the project's pool; for a version that is not the project's current one,
    only once the admin confirmed (`confirm=1`) on a page saying what will happen to the queue."""
    project = project_of(request)
    version = get_object_or_404(ModelVersion.objects.usable_in(project), pk=version_id)
    current = registry.current_model(project)
    if version != current and request.POST.get("confirm") != "1":
        return render(request, "scoring/rescore_confirm.html",
                      {"version": version, "current": current,
                       "generation": Generation.objects.filter(project=project).current_number()})
    rebuild_queue = request.POST.get("rebuild_queue", "1") == "1"
    # Only records the job: the ml worker verifies and loads the model (no torch here).
    job = scoring.start_rescore(model_version=version, project=project, created_by=request.user,
                                rebuild_queue=rebuild_queue)
    return redirect("scoring:rescore-job", pk=job.pk)


@roles.reviewer_required
@vary_on_headers("HX-Request")
def rescore_job(request: HttpRequest, pk: int) -> HttpResponse:
    job = get_object_or_404(RescoreJob.objects.filter(project=project_of(request)).select_related("model_version"),
                            pk=pk)
    context = {"job": job, "rates": job.rates(), "can_cancel": roles.is_admin(request.user)}
    return render(request, page_or_partial(request, "scoring/rescore_job.html", "progress"), context)


@require_POST
@roles.admin_required
def cancel_rescore(request: HttpRequest, pk: int) -> HttpResponse:
    """Cancel a running rescore: the worker stops at its next chunk; the queue is not rebuilt."""
    scoring.cancel_rescore(job=get_object_or_404(RescoreJob, pk=pk, project=project_of(request)), user=request.user)
    return redirect("scoring:rescore-job", pk=pk)


@roles.reviewer_required
def queue(request: HttpRequest) -> HttpResponse:
    project = project_of(request)
    generation = request.GET.get("generation", "")
    generations = Generation.objects.filter(project=project)
    number = int(generation) if generation.lstrip("-").isdigit() else generations.current_number()
    items = (
        QueueItem.objects.filter(project=project, generation=number,
                                 status__in=[QueueItem.Status.AVAILABLE, QueueItem.Status.LEASED])
        .select_related("solution__problem").order_by("-priority", "id")
    )
    page = Paginator(items, 50).get_page(request.GET.get("page"))
    shown = generations.filter(number=number).first()
    model = ModelVersion.objects.filter(name=shown.model_version_name).first() if shown else None
    context = {"page": page, "number": number, "generations": generations.filter(number__gte=0),
               "untrained_model": model if model is not None and model.is_untrained else None}
    return render(request, "scoring/queue.html", context)
