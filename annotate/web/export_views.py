"""Admin pages to take datasets out: a form that starts an export job, its progress, its file."""
from typing import Any

from django import forms
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods
from django.views.decorators.vary import vary_on_headers

from annotate.labeling.roles import admin_required as admin_only
from annotate.labeling.roles import project_of
from annotate.models import ExportJob, FinishReason
from annotate.pool import exporting
from annotate.web.htmx import page_or_partial


class ExportForm(forms.Form):
    format = forms.ChoiceField(choices=exporting.choices, initial="prm800k")
    generations = forms.CharField(required=False, help_text="Comma-separated, e.g. 1, 2 (empty: all)")
    since = forms.DateTimeField(required=False, help_text="Only labels made on or after (YYYY-MM-DD)")
    include_qc = forms.BooleanField(required=False, label="Include quality-control questions")
    finish_reasons = forms.MultipleChoiceField(
        choices=FinishReason.choices, required=False, widget=forms.CheckboxSelectMultiple, help_text="Empty: all"
    )
    neutral_is_good = forms.TypedChoiceField(
        choices=[("1", "good (Stepwise's default)"), ("0", "bad: only +1 is good (TRL's own PRM800K converter)")],
        coerce=lambda v: v == "1", initial="1",
        label="A neutral (0) rating counts as", help_text="TRL and soft labels only (neutral=good / neutral=bad)",
    )
    container = forms.ChoiceField(
        choices=[("jsonl", "JSON Lines (.jsonl)"), ("parquet", "Parquet with a dataset card (.zip)"),
                 ("hf_dataset", "Hugging Face datasets folder, load_from_disk (.zip)")],
        initial="jsonl", label="File", required=False,
    )
    labels = forms.ChoiceField(
        choices=[("human", "human labels"), ("automatic", "automatic labels (rollouts, imports)"),
                 ("both", "both, each row saying which"), ("judge", "judge labels (a verifier model) alone"),
                 ("consensus", "consensus: only the steps the sources below agree on")],
        initial="human", label="Labels", required=False,
        help_text="With automatic labels PRM800K gains an auto_labels key per step; ProcessBench is for human "
                  "labels, critique for human or judge labels",
    )
    consensus = forms.MultipleChoiceField(
        choices=[(name, name) for name in exporting.CONSENSUS_SOURCES], initial=list(exporting.DEFAULT_CONSENSUS),
        required=False, widget=forms.CheckboxSelectMultiple, label="Consensus of",
        help_text="With consensus labels: two or more sources (rollouts and judge, as Qwen's PRM study)",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        assert data is not None  # Form.clean returns cleaned_data
        found = exporting.FORMATS.get(data.get("format") or "")
        if found is None:
            return data
        try:
            exporting.check_labels(found.name, exporting.ExportOptions.from_dict(data))
        except exporting.ExportError as error:
            # "labels: processbench takes ..." -> on the labels field, "ProcessBench takes ...".
            field, _, message = str(error).partition(": ")
            self.add_error(field if field in self.fields else "labels", message.replace(found.name, found.title, 1))
        return data

    def clean_generations(self) -> list[int]:
        text = self.cleaned_data["generations"]
        try:
            return [int(part) for part in text.replace(" ", "").split(",") if part]
        except ValueError:
            raise forms.ValidationError(f"{text!r} is not a comma-separated list of integers") from None


@admin_only
@require_http_methods(["GET", "POST"])
def export_list(request: HttpRequest) -> HttpResponse:
    """The export form and recent jobs; a valid POST starts a job and shows its progress."""
    form = ExportForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        options = exporting.ExportOptions.from_dict(form.cleaned_data)
        job = exporting.create_export_job(format=form.cleaned_data["format"], options=options, user=request.user,
                                          project=project_of(request))
        return redirect("annotate:export-detail", pk=job.pk)
    jobs = ExportJob.objects.filter(project=project_of(request)).select_related("created_by").order_by("-id")[:20]
    return render(request, "annotate/export_list.html", {"form": form, "jobs": jobs})


@admin_only
@vary_on_headers("HX-Request")
def export_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """A job's page; its progress partial polls this URL (htmx gets the partial) until the job ends."""
    job = get_object_or_404(ExportJob, pk=pk, project=project_of(request))
    context = {"job": job, "available": exporting.finished_file(job) is not None,
               "consensus": exporting.consensus_counts(job.report or {})}
    return render(request, page_or_partial(request, "annotate/export_detail.html", "job-progress"), context)


@admin_only
def export_download(request: HttpRequest, pk: int) -> FileResponse:
    """The finished file; nothing is offered before the job has succeeded."""
    job = get_object_or_404(ExportJob, pk=pk, project=project_of(request))
    path = exporting.finished_file(job)
    if path is None:
        raise Http404("This export is not finished.")
    content_type = "application/zip" if path.suffix == ".zip" else "application/jsonl"
    return FileResponse(path.open("rb"), as_attachment=True, filename=exporting.download_name(job),
                        content_type=content_type)
