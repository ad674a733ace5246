"""Admin pages of generation runs: start one (problems, N, backend), watch it, cancel it.

Thin views: the form parses, `scoring.generation.runs` checks and records, the page renders. A
run's page is a job page (`jobs/generation/<pk>/`): the shared progress partial, polled with
htmx while the run is active, with the run's counts as its extras. Nothing here imports
torch: the ml worker loads the generator.
"""
from __future__ import annotations

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from annotate.labeling.roles import admin_required, project_of
from annotate.web.htmx import page_or_partial
from infra import outbound
from scoring.generation import runs as generation
from scoring.generation.generators import DEFAULT_PROMPT_TEMPLATE
from scoring.models import GenerationRun


class StartGenerationForm(forms.Form):
    problem_ids = forms.CharField(required=False, help_text="Comma-separated ids; else the source / split below")
    source = forms.CharField(required=False, max_length=100)
    split = forms.CharField(required=False, max_length=50)
    limit = forms.IntegerField(required=False, min_value=1)
    samples_per_problem = forms.IntegerField(min_value=1, max_value=256, initial=4, label="Samples per problem (N)")
    backend = forms.ChoiceField(choices=[("local", "local model"), ("openai", "OpenAI-compatible server")])
    model = forms.CharField(required=False, help_text="local: a model folder (empty: SmolLM2); server: the model id")
    base_url = forms.URLField(required=False, help_text="server: e.g. http://127.0.0.1:8000/v1")
    mode = forms.ChoiceField(choices=[("completions", "completions"), ("chat", "chat")])
    temperature = forms.FloatField(min_value=0, initial=0.7)
    max_tokens = forms.IntegerField(min_value=1, max_value=8192, initial=512)
    seed = forms.IntegerField(required=False)
    prompt_template = forms.CharField(widget=forms.Textarea(attrs={"rows": 5}), initial=DEFAULT_PROMPT_TEMPLATE,
                                      strip=False)

    def clean_problem_ids(self) -> list[int]:
        text = self.cleaned_data["problem_ids"]
        try:
            return [int(pk) for pk in text.split(",") if pk.strip()]
        except ValueError:
            raise forms.ValidationError("comma-separated integers expected") from None

    def clean_base_url(self) -> str:
        url = self.cleaned_data["base_url"]
        try:
            return outbound.check_url(url) if url else url
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None

    def run_options(self) -> dict:
        data = self.cleaned_data
        problems = ({"problem_ids": data["problem_ids"]} if data["problem_ids"] else
                    {key: data[key] for key in ("source", "split", "limit") if data[key]})
        spec = {"backend": data["backend"], **({"model": data["model"]} if data["model"] else {})}
        if data["backend"] == "openai":
            spec.update(base_url=data["base_url"], mode=data["mode"])
        return {"problem_filter": problems, "samples_per_problem": data["samples_per_problem"],
                "generator_spec": spec, "seed": data["seed"], "prompt_template": data["prompt_template"],
                "sampling": {"temperature": data["temperature"], "max_tokens": data["max_tokens"]}}


@admin_required
@require_http_methods(["GET", "POST"])
def generation_runs(request: HttpRequest) -> HttpResponse:
    """Recent runs and the form to start one; a bad field comes back on the form, named."""
    form = StartGenerationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            run = generation.start_generation_run(project=project_of(request), **form.run_options(),
                                                  created_by=request.user)
        except ValueError as error:
            form.add_error(None, str(error))
        else:
            return redirect("scoring:generation-run", pk=run.pk)
    runs = GenerationRun.objects.filter(project=project_of(request)).select_related("created_by").order_by("-id")[:50]
    return render(request, "scoring/generation_runs.html", {"form": form, "runs": runs})


@admin_required
@vary_on_headers("HX-Request")
def generation_run(request: HttpRequest, pk: int) -> HttpResponse:
    """One run; the job progress partial polls this URL until the run has finished."""
    run = get_object_or_404(GenerationRun, pk=pk, project=project_of(request))
    return render(request, page_or_partial(request, "scoring/generation_run.html", "job-progress"), {"run": run})


@require_POST
@admin_required
def cancel_generation_run(request: HttpRequest, pk: int) -> HttpResponse:
    generation.cancel_generation_run(run=get_object_or_404(GenerationRun, pk=pk, project=project_of(request)),
                                     user=request.user)
    return redirect("scoring:generation-run", pk=pk)
