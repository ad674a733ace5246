"""Admin pages of the retraining loop: runs (start, progress, loss curve, log) and evaluation.

Thin views: parse, one call into `scoring.learning.retraining`, render. Plots are inline SVG from
`scoring.web.charts`. A run's page is a job page (`jobs/training/<pk>/`): the shared progress
partial with the loss chart, gate and log as its extras.
"""
from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods
from django.views.decorators.vary import vary_on_headers

from annotate.labeling.roles import admin_required as admin_only
from annotate.labeling.roles import project_of
from annotate.web.htmx import page_or_partial
from scoring.core import evaluation
from scoring.core.training_data import HEAD_TYPES, LABEL_SOURCES, MODES
from scoring.learning import retraining
from scoring.learning.options import DEFAULT_GATE_METRIC
from scoring.models import ModelVersion, TrainingRun
from scoring.web.charts import best_of_n_chart, dotted, loss_chart, reliability_chart
from steps import arithmetic


class StartRunForm(forms.Form):
    head = forms.ChoiceField(choices=[(h, h) for h in HEAD_TYPES], initial="point")
    mode = forms.ChoiceField(choices=[(m, m) for m in MODES], initial="head",
                             help_text="head: frozen backbone, cached features (the CPU default)")
    epochs = forms.IntegerField(min_value=1, max_value=1000, initial=30)
    labels = forms.ChoiceField(choices=[(s, s) for s in LABEL_SOURCES], initial="human", required=False,
                               help_text="automatic: rollout / imported step labels (K of N), never mixed in silently; "
                                         "judge: a verifier's verdicts; consensus: steps where rollouts and the "
                                         "judge agree")
    gate_metric = forms.ChoiceField(
        choices=[(m, m) for m in evaluation.GATE_METRICS], initial=DEFAULT_GATE_METRIC
    )

    def options(self) -> dict:
        data = self.cleaned_data
        return {"train": {"head": data["head"], "mode": data["mode"], "epochs": data["epochs"],
                          "labels": data["labels"] or "human"},
                "gate_metric": data["gate_metric"]}


@admin_only
@require_http_methods(["GET", "POST"])
def training_runs(request: HttpRequest) -> HttpResponse:
    """Recent runs and a form to start one (refused while another is active)."""
    form = StartRunForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            run = retraining.start_training_run(project=project_of(request), options=form.options(),
                                                created_by=request.user)
        except retraining.TrainingAlreadyActive as error:
            messages.error(request, str(error))
            return redirect("scoring:training-runs")
        return redirect("scoring:training-run", pk=run.pk)
    project = project_of(request)
    runs = (TrainingRun.objects.filter(project=project).select_related("parent", "result", "created_by")
            .order_by("-id")[:50])
    versions = ModelVersion.objects.lineage(project).with_current(project).order_by("-created_at")[:20]
    return render(request, "scoring/training_runs.html",
                  {"form": form, "runs": runs, "active": retraining.active_run(project), "versions": versions})


@admin_only
@vary_on_headers("HX-Request")
def training_run(request: HttpRequest, pk: int) -> HttpResponse:
    """One run; the job progress partial polls this URL until the run has finished."""
    run = get_object_or_404(TrainingRun.objects.filter(project=project_of(request)).select_related("parent", "result"),
                            pk=pk)
    context = {"run": run, "loss_chart": loss_chart(run.loss_curve)}
    return render(request, page_or_partial(request, "scoring/training_run.html", "job-progress"), context)


@admin_only
def model_evaluation(request: HttpRequest, version_id: int) -> HttpResponse:
    """A version's metrics and plots next to those of the version it was compared with."""
    version = get_object_or_404(ModelVersion.objects.usable_in(project_of(request)).with_current(project_of(request)),
                                pk=version_id)
    metrics = version.metrics or {}
    new, old = metrics.get("eval"), metrics.get("compared_eval")
    names = [version.name, metrics.get("compared_with") or "previous"]
    columns = [(names[0], new), (names[1], old)] if old else [(names[0], new)]
    run = version.training_runs.order_by("-id").first()
    return render(request, "scoring/training_evaluation.html", {
        "version": version, "has_eval": new is not None, "gate": metrics.get("gate"),
        "rows": metric_rows([m for _, m in columns]), "names": [n for n, _ in columns],
        "bon_rows": best_of_n_rows(columns),
        "reliability_chart": reliability_chart(columns) if new else "",
        "bon_chart": best_of_n_chart(columns) if new else "",
        "loss_chart": loss_chart(run.loss_curve) if run else "", "run": run,
    })


# --- tables -----------------------------------------------------------------------------------

METRIC_ROWS = [
    ("Step ROC-AUC", "step_auc"), ("Paired AUC (vs reference step)", "paired_auc"),
    ("ProcessBench F1", "processbench.f1"), ("  accuracy on erroneous", "processbench.acc_erroneous"),
    ("  accuracy on correct", "processbench.acc_correct"), ("ECE (lower is better)", "calibration.ece"),
    ("Mean predicted p", "mean_prob"), ("Labeled positive rate", "positive_rate"),
    ("Held-out solutions", "n_solutions"), ("Held-out labeled steps", "n_steps"),
]


def metric_rows(columns: list[dict | None]) -> list[tuple[str, list[str]]]:
    return [(label, [number(dotted(m, path)) for m in columns]) for label, path in METRIC_ROWS]


def number(value, digits: int = 4) -> str:
    """Counts as integers, rates with `digits` decimals, a dash when not measured."""
    if value is None:
        return "—"
    return str(value) if isinstance(value, int) else f"{value:.{digits}f}"


def best_of_n_rows(columns: list[tuple[str, dict | None]]) -> list[tuple[str, str, list]]:
    """(model, N, accuracies per method) for every N measured."""
    rows = []
    for name, metrics in columns:
        table = dotted(metrics, "best_of_n.by_n") or {}
        for n, row in table.items():
            rows.append((name, n, [number(row.get(m), 3) for m in BON_METHODS]))
    return rows


BON_METHODS = (*arithmetic.AGGREGATIONS_WITH_RISK, "majority", "oracle")
