"""Admin pages to bring data in: upload a JSONL file, watch its import job, fetch the report."""
from django import forms
from django.conf import settings
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.functional import lazy
from django.views.decorators.http import require_GET, require_http_methods
from django.views.decorators.vary import vary_on_headers

from annotate.labeling.roles import admin_required as admin_only
from annotate.labeling.roles import project_of
from annotate.models import ImportJob, LabelingConfig
from annotate.pool import importing
from annotate.web.htmx import page_or_partial

SPLIT_CHOICES = [
    ("auto", "auto: blank-line paragraphs if the text has them, else lines"),
    ("blank_line", "blank_line: one step per paragraph"),
    ("line", "line: one step per line"),
    ("sentence", "sentence: one step per sentence"),
    ("explicit", 'explicit: every line gives its "steps" as a list'),
]


class ImportForm(forms.Form):
    file = forms.FileField(help_text=lazy(lambda: (
        f"JSON Lines: one object per line, at most {settings.STEPWISE_MAX_UPLOAD_BYTES / 2**20:,.0f} MiB "
        "(a larger file is refused before it is read)"), str)())
    format = forms.ChoiceField(choices=importing.choices, initial="auto")
    # Not required: a form posted by an older page or a script without the field means auto.
    split_mode = forms.TypedChoiceField(
        choices=SPLIT_CHOICES, initial="auto", required=False, empty_value="auto", label="Steps",
        help_text='How solution text becomes steps (a lead-in ending in ":" always keeps what it introduces)',
    )
    source = forms.CharField(required=False, max_length=100, help_text="Stored on problems and solutions")
    atomic = forms.BooleanField(required=False, label="All or nothing", help_text="Import nothing if any line fails")


@admin_only
@require_http_methods(["GET", "POST"])
def import_list(request: HttpRequest) -> HttpResponse:
    """The upload form and recent imports; a valid POST saves the file and starts a job."""
    form = ImportForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data["file"]
        path = importing.save_upload(chunks=upload.chunks(), original_name=upload.name)
        job = importing.create_import_job(
            path=path, original_name=upload.name, format=form.cleaned_data["format"],
            split_mode=form.cleaned_data["split_mode"],
            source=form.cleaned_data["source"], atomic=form.cleaned_data["atomic"], user=request.user,
            project=project_of(request),
        )
        return redirect("annotate:import-detail", pk=job.pk)
    jobs = ImportJob.objects.filter(project=project_of(request)).select_related("created_by").order_by("-id")[:20]
    return render(request, "annotate/import_list.html", {"form": form, "jobs": jobs})


@admin_only
@require_GET
@vary_on_headers("HX-Request")
def import_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One import: what was uploaded, its progress, its graded counts and what happens next;
    htmx polls the `job-progress` partial."""
    job = get_object_or_404(ImportJob.objects.filter(project=project_of(request)).select_related("created_by"), pk=pk)
    config = LabelingConfig.of(project_of(request))
    context = {
        "job": job, "has_report": importing.finished_report(job) is not None,
        # What limits the queue, so the page can say why some new solutions wait.
        "queue_size": config.queue_size, "per_problem": config.queue_per_problem,
    }
    return render(request, page_or_partial(request, "annotate/import_detail.html", "job-progress"), context)


@admin_only
@require_GET
def import_report(request: HttpRequest, pk: int) -> FileResponse:
    """The finished job's report: one JSON line per input line."""
    job = get_object_or_404(ImportJob, pk=pk, project=project_of(request))
    path = importing.finished_report(job)
    if path is None:
        raise Http404("This import has no report yet.")
    return FileResponse(path.open("rb"), as_attachment=True, filename=f"import-{job.pk}-report.jsonl",
                        content_type="application/jsonl")
