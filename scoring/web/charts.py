"""The training pages' charts: loss curves, reliability diagrams, best-of-N.

Drawn on the server from the stored numbers by the one chart owner (`infra.charts`: SVG, labels
escaped, numbers formatted), so nothing is fetched from a CDN and no image is cached.
"""

from __future__ import annotations

from django.utils.safestring import SafeString, mark_safe

from infra import charts


def dotted(data: dict | None, path: str):
    """`data["a"]["b"]` for path "a.b"; None wherever a level is missing."""
    for key in path.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return data


def line_chart(series, **options) -> SafeString:
    """`infra.charts.line_chart` for a template: its SVG escapes every label itself, so it is safe as is."""
    return mark_safe(charts.line_chart(series, **options))


def loss_chart(curve: list[dict]) -> SafeString:
    train = [(p["epoch"], p["train_loss"]) for p in curve if p.get("train_loss") is not None]
    val = [(p["epoch"], p["val_loss"]) for p in curve if p.get("val_loss") is not None]
    return line_chart([("train", train), ("validation", val)], x_label="epoch", y_label="loss")


def reliability_chart(columns: list[tuple[str, dict | None]]) -> SafeString:
    series = [
        (name, [(b["confidence"], b["accuracy"]) for b in dotted(m, "calibration.bins") or []]) for name, m in columns
    ]
    return line_chart(
        series,
        x_label="predicted p (bin mean)",
        y_label="fraction good",
        x_range=(0.0, 1.0),
        y_range=(0.0, 1.0),
        diagonal=True,
    )


def best_of_n_chart(columns: list[tuple[str, dict | None]]) -> SafeString:
    series: list[tuple[str, list[tuple[float, float]]]] = []
    for name, metrics in columns:
        table = dotted(metrics, "best_of_n.by_n") or {}
        series.append((f"{name} (product)", [(int(n), row["product"]) for n, row in table.items()]))
    first = dotted(columns[0][1], "best_of_n.by_n") or {}
    series.append(("majority vote", [(int(n), row["majority"]) for n, row in first.items()]))
    series.append(("last step", [(int(n), row["last"]) for n, row in first.items()]))
    return line_chart(series, x_label="N", y_label="accuracy", y_range=(0.0, 1.0))
