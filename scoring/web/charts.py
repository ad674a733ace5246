"""Inline SVG charts of the training pages: loss curves, reliability diagrams, best-of-N.

Drawn on the server from the stored numbers, so nothing is fetched from a CDN and no image
is cached; labels are escaped, numbers formatted.
"""

from __future__ import annotations

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

COLORS = ("#2f5bd3", "#c0392b", "#1e8e3e", "#b07d00", "#7d3cb5", "#667")


def dotted(data: dict | None, path: str):
    """`data["a"]["b"]` for path "a.b"; None wherever a level is missing."""
    for key in path.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return data


def line_chart(
    series: list[tuple[str, list[tuple[float, float]]]],
    *,
    x_label: str,
    y_label: str,
    x_range: tuple[float, float] | None = None,
    y_range: tuple[float, float] | None = None,
    diagonal: bool = False,
    width: int = 480,
    height: int = 240,
) -> SafeString:
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

    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(y_label)} by {escape(x_label)}">',
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#999"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#999"/>',
    ]
    for y in (y0, (y0 + y1) / 2, y1):
        parts.append(f'<text x="{left - 4}" y="{sy(y) + 4:.1f}" font-size="10" text-anchor="end">{y:.3g}</text>')
    ticks = (x0, (x0 + x1) / 2, x1) if x_range else sorted(set(xs))[:: max(1, len(set(xs)) // 8)]
    for x in ticks:
        parts.append(
            f'<text x="{sx(x):.1f}" y="{height - bottom + 14}" font-size="10" text-anchor="middle">{x:.3g}</text>'
        )
    parts.append(
        f'<text x="{(left + width - right) / 2}" y="{plot_height - 6}" font-size="11" text-anchor="middle">'
        f"{escape(x_label)}</text>"
    )
    parts.append(
        f'<text x="12" y="{(top + height - bottom) / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 12 {(top + height - bottom) / 2})">{escape(y_label)}</text>'
    )
    if diagonal:
        parts.append(
            f'<line x1="{sx(x0):.1f}" y1="{sy(y0):.1f}" x2="{sx(x1):.1f}" y2="{sy(y1):.1f}" '
            f'stroke="#bbb" stroke-dasharray="4 3"/>'
        )
    for i, (name, pts) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts if y is not None)
        parts.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{coords}">'
            f"<title>{escape(name)}</title></polyline>"
        )
        parts.extend(
            f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{color}"/>' for x, y in pts if y is not None
        )
        legend_y = plot_height + 12 + 16 * i
        parts.append(
            f'<line x1="{left}" y1="{legend_y - 4}" x2="{left + 18}" y2="{legend_y - 4}" '
            f'stroke="{color}" stroke-width="2"/>'
            f'<text x="{left + 24}" y="{legend_y}" font-size="11" fill="{color}">{escape(name)}</text>'
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))


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
