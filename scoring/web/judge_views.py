"""Admin pages of judge labeling: start a judge job (a verifier model's verdicts), watch it, cancel it.

Thin views: the form parses, `scoring.generation.judge_labeling` checks and records, the page
renders. A job's page is a job page (`jobs/judge/<pk>/`): the shared progress partial, polled with
htmx while the job is active, with the job's counts and its unparseable answers as its extras.
Nothing here imports torch: the ml worker loads the judge.
"""
from __future__ import annotations

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from annotate.labeling.roles import admin_required, project_of
from annotate.models import JudgeAnswer
from annotate.web.htmx import page_or_partial
from scoring.generation import judge_labeling
from scoring.generation.generators import SamplingParams
from scoring.generation.labeling_jobs import solution_ids_option, spec_from_option
from scoring.models import JudgeLabelJob

# The unparseable answers a job's page lists (the rest are in the admin and the API).
UNPARSEABLE_SHOWN = 20


class StartJudgeForm(forms.Form):
    generator = forms.CharField(
        initial="default", max_length=2000,
        help_text='"default" (the local SmolLM2), a local model folder, or a JSON spec such as '
                  '{"backend": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "…", "mode": "chat"}')
    solution_ids = forms.CharField(required=False, help_text="Comma-separated ids; empty: every eligible solution")
    limit = forms.IntegerField(required=False, min_value=1)
    max_tokens = forms.IntegerField(min_value=1, max_value=32768, initial=judge_labeling.DEFAULT_PARAMS.max_tokens)
    temperature = forms.FloatField(min_value=0, initial=0.0)

    def clean(self) -> dict:
        data = super().clean() or {}
        try:
            data["generator_spec"] = spec_from_option(data.get("generator", ""))
            data["solution_ids"] = solution_ids_option(data.get("solution_ids", ""))
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None
        return data

    def job_options(self) -> dict:
        data = self.cleaned_data
        return {"generator_spec": data["generator_spec"], "solution_ids": data["solution_ids"], "limit": data["limit"],
                "params": SamplingParams(max_tokens=data["max_tokens"], temperature=data["temperature"], top_p=1.0)}


@admin_required
@require_http_methods(["GET", "POST"])
def judge_jobs(request: HttpRequest) -> HttpResponse:
    """Recent judge jobs with their progress, and the form to start one; a bad field comes back on the form."""
    form = StartJudgeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            job = judge_labeling.start_judge_labeling(project=project_of(request), **form.job_options(),
                                                      created_by=request.user)
        except ValueError as error:
            form.add_error(None, str(error))
        else:
            return redirect("scoring:judge-job", pk=job.pk)
    jobs = (JudgeLabelJob.objects.filter(project=project_of(request)).select_related("run", "created_by")
            .order_by("-id")[:50])
    return render(request, "scoring/judge_jobs.html", {"form": form, "jobs": jobs,
                                                        "template": judge_labeling.judge_template()})


@admin_required
@vary_on_headers("HX-Request")
def judge_job(request: HttpRequest, pk: int) -> HttpResponse:
    """One job; the job progress partial polls this URL until the job has finished."""
    job = get_object_or_404(JudgeLabelJob.objects.select_related("run"), pk=pk, project=project_of(request))
    unparseable = (JudgeAnswer.objects.filter(run=job.run_id, parsed=False).select_related("solution")
                   .order_by("solution_id")[:UNPARSEABLE_SHOWN])
    return render(request, page_or_partial(request, "scoring/judge_job.html", "job-progress"),
                  {"job": job, "unparseable": unparseable})


@require_POST
@admin_required
def cancel_judge_job(request: HttpRequest, pk: int) -> HttpResponse:
    judge_labeling.cancel_judge_job(job=get_object_or_404(JudgeLabelJob, pk=pk, project=project_of(request)),
                                    user=request.user)
    return redirect("scoring:judge-job", pk=pk)
