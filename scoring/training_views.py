"""Admin pages of the retraining loop: runs (start, progress, loss curve, log) and evaluation.

Thin views: parse, one call into `scoring.retraining`, render. Plots are inline SVG drawn
here from the stored numbers, so nothing is fetched from a CDN and no image is cached.
"""
from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_http_methods
from django.views.decorators.vary import vary_on_headers

from annotate.htmx import page_or_partial
from annotate.roles import admin_required as admin_only

from . import evaluation, retraining
from .models import ModelVersion, TrainingRun
from .training_data import HEAD_TYPES, MODES

COLORS = ("#2f5bd3", "#c0392b", "#1e8e3e", "#b07d00", "#7d3cb5", "#667")


class StartRunForm(forms.Form):
    head = forms.ChoiceField(choices=[(h, h) for h in HEAD_TYPES], initial="point")
    mode = forms.ChoiceField(choices=[(m, m) for m in MODES], initial="head",
                             help_text="head: frozen backbone, cached features (the CPU default)")
    epochs = forms.IntegerField(min_value=1, max_value=1000, initial=30)
    gate_metric = forms.ChoiceField(choices=[(m, m) for m in evaluation.GATE_METRICS], initial=retraining.DEFAULT_GATE_METRIC)

    def options(self) -> dict:
        data = self.cleaned_data
        return {"train": {"head": data["head"], "mode": data["mode"], "epochs": data["epochs"]},
                "gate_metric": data["gate_metric"]}


@admin_only
@require_http_methods(["GET", "POST"])
def training_runs(request: HttpRequest) -> HttpResponse:
    """Recent runs and a form to start one (refused while another is active)."""
    form = StartRunForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            run = retraining.start_training_run(options=form.options(), created_by=request.user)
        except retraining.TrainingAlreadyActive as error:
            messages.error(request, str(error))
            return redirect("scoring:training-runs")
        return redirect("scoring:training-run", run_id=run.pk)
    runs = TrainingRun.objects.select_related("parent", "result", "created_by").order_by("-id")[:50]
    return render(request, "scoring/training_runs.html",
                  {"form": form, "runs": runs, "active": retraining.active_run(),
                   "versions": ModelVersion.objects.order_by("-created_at")[:20]})


@admin_only
@vary_on_headers("HX-Request")
def training_run(request: HttpRequest, run_id: int) -> HttpResponse:
    """One run; htmx polls the `run-progress` partial until the run has finished."""
    run = get_object_or_404(TrainingRun.objects.select_related("parent", "result"), pk=run_id)
    context = {"run": run, "finished": run.is_finished,
               "loss_chart": loss_chart(run.loss_curve)}
    return render(request, page_or_partial(request, "scoring/training_run.html", "run-progress"), context)


@admin_only
def model_evaluation(request: HttpRequest, version_id: int) -> HttpResponse:
    """A version's metrics and plots next to those of the version it was compared with."""
    version = get_object_or_404(ModelVersion, pk=version_id)
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


def dotted(data: dict | None, path: str):
    for key in path.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return data


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


BON_METHODS = ("product", "min", "last", "mean", "risk", "majority", "oracle")


# --- inline SVG charts ------------------------------------------------------------------------


def line_chart(series: list[tuple[str, list[tuple[float, float]]]], *, x_label: str, y_label: str,
               x_range: tuple[float, float] | None = None, y_range: tuple[float, float] | None = None,
               diagonal: bool = False, width: int = 480, height: int = 240) -> SafeString:
    """A small multi-series line chart as inline SVG (labels escaped, numbers formatted).

    The legend sits under the plot, one line per series, so long version names never
    cover the data.
    """
    points = [p for _, pts in series for p in pts if p[1] is not None]
    if not points:
        return mark_safe("")
    plot_height = height
    height += 16 * len(series)
    left, right, top, bottom = 48, 12, 12, 36 + 16 * len(series)
    xs = [p[0] for p in points]
    x0, x1 = x_range or (min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1)
    y0, y1 = y_range or (min(p[1] for p in points), max(p[1] for p in points))
    if y1 <= y0:
        y0, y1 = y0 - 0.5, y1 + 0.5

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (width - left - right)

    def sy(y: float) -> float:
        return height - bottom - (y - y0) / (y1 - y0) * (height - top - bottom)

    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
             f'aria-label="{escape(y_label)} by {escape(x_label)}">',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#999"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#999"/>']
    for y in (y0, (y0 + y1) / 2, y1):
        parts.append(f'<text x="{left - 4}" y="{sy(y) + 4:.1f}" font-size="10" text-anchor="end">{y:.3g}</text>')
    ticks = (x0, (x0 + x1) / 2, x1) if x_range else sorted(set(xs))[:: max(1, len(set(xs)) // 8)]
    for x in ticks:
        parts.append(f'<text x="{sx(x):.1f}" y="{height - bottom + 14}" font-size="10" text-anchor="middle">{x:.3g}</text>')
    parts.append(f'<text x="{(left + width - right) / 2}" y="{plot_height - 6}" font-size="11" text-anchor="middle">{escape(x_label)}</text>')
    parts.append(f'<text x="12" y="{(top + height - bottom) / 2}" font-size="11" text-anchor="middle" '
                 f'transform="rotate(-90 12 {(top + height - bottom) / 2})">{escape(y_label)}</text>')
    if diagonal:
        parts.append(f'<line x1="{sx(x0):.1f}" y1="{sy(y0):.1f}" x2="{sx(x1):.1f}" y2="{sy(y1):.1f}" '
                     f'stroke="#bbb" stroke-dasharray="4 3"/>')
    for i, (name, pts) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts if y is not None)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{coords}"><title>{escape(name)}</title></polyline>')
        parts.extend(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{color}"/>' for x, y in pts if y is not None)
        legend_y = plot_height + 12 + 16 * i
        parts.append(f'<line x1="{left}" y1="{legend_y - 4}" x2="{left + 18}" y2="{legend_y - 4}" stroke="{color}" stroke-width="2"/>'
                     f'<text x="{left + 24}" y="{legend_y}" font-size="11" fill="{color}">{escape(name)}</text>')
    parts.append("</svg>")
    return mark_safe("".join(parts))


def loss_chart(curve: list[dict]) -> SafeString:
    train = [(p["epoch"], p["train_loss"]) for p in curve if p.get("train_loss") is not None]
    val = [(p["epoch"], p["val_loss"]) for p in curve if p.get("val_loss") is not None]
    return line_chart([("train", train), ("validation", val)], x_label="epoch", y_label="loss")


def reliability_chart(columns: list[tuple[str, dict | None]]) -> SafeString:
    series = [(name, [(b["confidence"], b["accuracy"]) for b in dotted(m, "calibration.bins") or []])
              for name, m in columns]
    return line_chart(series, x_label="predicted p (bin mean)", y_label="fraction good", x_range=(0.0, 1.0),
                      y_range=(0.0, 1.0), diagonal=True)


def best_of_n_chart(columns: list[tuple[str, dict | None]]) -> SafeString:
    series = []
    for name, metrics in columns:
        table = dotted(metrics, "best_of_n.by_n") or {}
        series.append((f"{name} (product)", [(int(n), row["product"]) for n, row in table.items()]))
    first = dotted(columns[0][1], "best_of_n.by_n") or {}
    series.append(("majority vote", [(int(n), row["majority"]) for n, row in first.items()]))
    series.append(("last step", [(int(n), row["last"]) for n, row in first.items()]))
    return line_chart(series, x_label="N", y_label="accuracy", y_range=(0.0, 1.0))
