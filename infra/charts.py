"""Charts, one way: small line charts drawn as SVG text from the numbers.

Every chart Stepwise draws comes from here: the training and models pages inline them
(`scoring.web.charts`), `eval_search` writes its search curves as an .svg file
(`scoring.search.evaluation.plot`), and the benchmarks draw their learning curves with them
(`bench/simulation_report.py`). Labels are escaped (`html.escape`), numbers formatted; the x axis
is linear or logarithmic. Nothing is fetched and no image library is needed: plain Python, no
Django, so both the web process and a command without a display can draw.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

COLORS = ("#2f5bd3", "#c0392b", "#1e8e3e", "#b07d00", "#7d3cb5", "#667")
SVG_NS = "http://www.w3.org/2000/svg"
TICK_FONT, LABEL_FONT = 10, 11
# The y axis's label, rotated, reads upwards along x = Y_LABEL_X, its glyphs reaching left of that
# line by the font's ascent and right of it by its descent (about 0.3 em): the tick labels must
# start right of that.
Y_LABEL_X = 12
Y_LABEL_RIGHT = Y_LABEL_X + 0.3 * LABEL_FONT
TICK_PAD = 4  # between a y tick label and the axis, and between the widest one and the y axis's label
MIN_LEFT = 48  # the plot's left edge where the tick labels are short, as every chart had it
Point = tuple[float, float | None]


@dataclass(frozen=True)
class Series:
    """One line: its points (a None y is a gap), and how it is drawn."""

    name: str
    points: Sequence[Point]
    color: str | None = None  # else the next of COLORS
    dash: str | None = None  # an SVG stroke-dasharray: "4 3" dashed, "1 3" dotted
    labels: Sequence[str] = ()  # text beside each point, in order
    band: Sequence[tuple[float, float, float]] = ()  # (x, low, high): a shaded range around the line
    markers: bool = True


@dataclass(frozen=True)
class Rule:
    """A horizontal reference line across the plot (a baseline), named in the legend."""

    name: str
    y: float
    dash: str = "4 3"
    color: str = "#888"


def number(value: float) -> str:
    """A tick or value as people write it: 3 significant digits, integers below a million whole."""
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.3g}"


@dataclass
class _Axes:
    """The plot area and the two scales that map data onto it."""

    left: float
    right: float
    top: float
    bottom: float
    x0: float
    x1: float
    y0: float
    y1: float
    log_x: bool = False
    _span: float = field(init=False, default=1.0)

    def __post_init__(self) -> None:
        self._span = (self._x(self.x1) - self._x(self.x0)) or 1.0

    def _x(self, x: float) -> float:
        return math.log10(x) if self.log_x else x

    def sx(self, x: float) -> float:
        return self.left + (self._x(x) - self._x(self.x0)) / self._span * (self.right - self.left)

    def sy(self, y: float) -> float:
        return self.bottom - (y - self.y0) / (self.y1 - self.y0) * (self.bottom - self.top)


def line_chart(
    series: Sequence[Series | tuple[str, Sequence[Point]]],
    *,
    x_label: str,
    y_label: str,
    x_range: tuple[float, float] | None = None,
    y_range: tuple[float, float] | None = None,
    log_x: bool = False,
    diagonal: bool = False,
    rules: Sequence[Rule] = (),
    title: str | None = None,
    width: int = 480,
    height: int = 240,
) -> str:
    """A small multi-series line chart as SVG text ("" when there is nothing to draw).

    The legend sits under the plot, one line per series, so long names never cover the data.
    `log_x`: the x axis in powers of ten (points at x <= 0 cannot be placed and are left out).
    """
    lines = [s if isinstance(s, Series) else Series(s[0], s[1]) for s in series]
    if log_x:
        lines = [_positive(s) for s in lines]
    points = [(x, y) for s in lines for x, y in s.points if y is not None]
    if not points:
        return ""
    legend = len(lines) + len(rules)
    plot_height, top = height, 12 + (18 if title else 0)
    height += top - 12 + 16 * legend
    x0, x1, y0, y1 = _ranges(points, lines, rules, x_range, y_range)
    # The plot starts right of its widest y tick label, which starts right of the y axis's label.
    widest_tick = max(_text_width(number(y), TICK_FONT) for y in _y_ticks(y0, y1))
    left = max(MIN_LEFT, math.ceil(Y_LABEL_RIGHT + TICK_PAD + widest_tick + TICK_PAD))
    axes = _Axes(left, width - 12, top, plot_height + top - 12 - 36, x0, x1, y0, y1, log_x=log_x)
    parts = [
        f'<svg xmlns="{SVG_NS}" class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{escape(y_label)} by {escape(x_label)}">',
    ]
    if title:
        parts.append(f'<text x="{width / 2}" y="14" font-size="12" text-anchor="middle">{escape(title)}</text>')
    parts.extend(_axes(axes, points, x_label, y_label, x_range is not None))
    if diagonal:
        parts.append(f'<line x1="{axes.sx(axes.x0):.1f}" y1="{axes.sy(axes.y0):.1f}" x2="{axes.sx(axes.x1):.1f}" '
                     f'y2="{axes.sy(axes.y1):.1f}" stroke="#bbb" stroke-dasharray="4 3"/>')
    legend_top = axes.bottom + 36
    for i, line in enumerate(lines):
        color = line.color or COLORS[i % len(COLORS)]
        parts.extend(_series(axes, line, color))
        parts.append(_legend_row(axes.left, legend_top + 12 + 16 * i, line.name, color, line.dash))
    for j, rule in enumerate(rules):
        y = axes.sy(rule.y)
        parts.append(f'<line x1="{axes.left}" y1="{y:.1f}" x2="{axes.right}" y2="{y:.1f}" stroke="{rule.color}" '
                     f'stroke-dasharray="{rule.dash}"><title>{escape(rule.name)}</title></line>')
        parts.append(_legend_row(axes.left, legend_top + 12 + 16 * (len(lines) + j), rule.name, rule.color, rule.dash))
    parts.append("</svg>")
    return "".join(parts)


def grid(charts: Sequence[str], *, columns: int, title: str | None = None) -> str:
    """Several charts side by side in one SVG, `columns` to a row, under an optional title."""
    charts = [c for c in charts if c]
    sizes = [(_size(c, "width"), _size(c, "height")) for c in charts]
    cell_w = max((w for w, _ in sizes), default=0)
    cell_h = max((h for _, h in sizes), default=0)
    top = 24 if title else 0
    rows = -(-len(charts) // columns)
    width, height = cell_w * columns, top + cell_h * rows
    parts = [f'<svg xmlns="{SVG_NS}" class="chart" viewBox="0 0 {width} {height}" width="{width}" '
             f'height="{height}" role="img">']
    if title:
        parts.append(f'<text x="{width / 2}" y="16" font-size="13" text-anchor="middle">{escape(title)}</text>')
    for i, chart in enumerate(charts):
        x, y = cell_w * (i % columns), top + cell_h * (i // columns)
        # A nested <svg> takes x and y: each chart keeps its own coordinates.
        parts.append(chart.replace("<svg ", f'<svg x="{x}" y="{y}" ', 1))
    parts.append("</svg>")
    return "".join(parts)


def write_svg(svg: str, path: Path) -> Path:
    """Write a chart as a standalone .svg file (the XML declaration first); returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('<?xml version="1.0" encoding="UTF-8"?>\n' + svg + "\n", encoding="utf-8")
    return path


# --- the pieces ------------------------------------------------------------------------------


def _positive(line: Series) -> Series:
    keep = [i for i, (x, _) in enumerate(line.points) if x > 0]
    return Series(line.name, [line.points[i] for i in keep], line.color, line.dash,
                  [line.labels[i] for i in keep if i < len(line.labels)],
                  [b for b in line.band if b[0] > 0], line.markers)


def _ranges(
    points: list[tuple[float, float]], lines: Sequence[Series], rules: Sequence[Rule],
    x_range: tuple[float, float] | None, y_range: tuple[float, float] | None,
) -> tuple[float, float, float, float]:
    xs = [x for x, _ in points]
    x0, x1 = x_range or (min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1)
    ys = [y for _, y in points] + [r.y for r in rules] + [v for s in lines for _, lo, hi in s.band for v in (lo, hi)]
    y0, y1 = y_range or (min(ys), max(ys))
    if y1 <= y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    return x0, x1, y0, y1


def _text_width(text: str, font_size: float) -> float:
    """How wide a tick label is drawn, estimated: the server measures no font. Widths in em of
    DejaVu Sans (Debian's default sans-serif, among the widest), so other fonts draw it narrower."""
    return font_size * sum(0.84 if c == "+" else 0.32 if c in ".," else 0.65 for c in text)


def _y_ticks(y0: float, y1: float) -> tuple[float, float, float]:
    return y0, (y0 + y1) / 2, y1


def _x_ticks(axes: _Axes, xs: list[float], given_range: bool) -> list[float]:
    if axes.log_x:
        powers = [10.0**k for k in range(math.floor(math.log10(axes.x0)), math.ceil(math.log10(axes.x1)) + 1)]
        inside = [p for p in powers if axes.x0 <= p <= axes.x1]
        return inside if len(inside) >= 2 else sorted({axes.x0, *inside, axes.x1})
    if given_range:
        return [axes.x0, (axes.x0 + axes.x1) / 2, axes.x1]
    distinct = sorted(set(xs))
    return distinct[:: max(1, len(distinct) // 8)]


def _axes(axes: _Axes, points: list[tuple[float, float]], x_label: str, y_label: str, given_range: bool) -> list[str]:
    middle_y = (axes.top + axes.bottom) / 2
    parts = [
        f'<line x1="{axes.left}" y1="{axes.bottom}" x2="{axes.right}" y2="{axes.bottom}" stroke="#999"/>',
        f'<line x1="{axes.left}" y1="{axes.top}" x2="{axes.left}" y2="{axes.bottom}" stroke="#999"/>',
    ]
    for y in _y_ticks(axes.y0, axes.y1):
        parts.append(f'<text class="y-tick" x="{axes.left - TICK_PAD}" y="{axes.sy(y) + 4:.1f}" '
                     f'font-size="{TICK_FONT}" text-anchor="end">{number(y)}</text>')
    for x in _x_ticks(axes, [p[0] for p in points], given_range):
        parts.append(f'<text class="x-tick" x="{axes.sx(x):.1f}" y="{axes.bottom + 14}" font-size="{TICK_FONT}" '
                     f'text-anchor="middle">{number(x)}</text>')
    parts.append(f'<text class="x-label" x="{(axes.left + axes.right) / 2}" y="{axes.bottom + 30}" '
                 f'font-size="{LABEL_FONT}" text-anchor="middle">{escape(x_label)}</text>')
    parts.append(f'<text class="y-label" x="{Y_LABEL_X}" y="{middle_y}" font-size="{LABEL_FONT}" '
                 f'text-anchor="middle" transform="rotate(-90 {Y_LABEL_X} {middle_y})">{escape(y_label)}</text>')
    return parts


def _series(axes: _Axes, line: Series, color: str) -> list[str]:
    parts = []
    if line.band:
        upper = [f"{axes.sx(x):.1f},{axes.sy(hi):.1f}" for x, _, hi in line.band]
        lower = [f"{axes.sx(x):.1f},{axes.sy(lo):.1f}" for x, lo, _ in reversed(line.band)]
        parts.append(f'<polygon points="{" ".join(upper + lower)}" fill="{color}" fill-opacity="0.15" stroke="none"/>')
    drawn = [(x, y) for x, y in line.points if y is not None]
    coords = " ".join(f"{axes.sx(x):.1f},{axes.sy(y):.1f}" for x, y in drawn)
    dash = f' stroke-dasharray="{line.dash}"' if line.dash else ""
    parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{coords}">'
                 f"<title>{escape(line.name)}</title></polyline>")
    if line.markers:
        parts.extend(f'<circle cx="{axes.sx(x):.1f}" cy="{axes.sy(y):.1f}" r="2.5" fill="{color}"/>' for x, y in drawn)
    for (x, y), label in zip(line.points, line.labels):
        if y is not None and label:
            # Beside the point, on its left near the right edge, so the label stays inside the chart.
            at_edge = axes.sx(x) > axes.right - 40
            anchor = ' text-anchor="end"' if at_edge else ""
            parts.append(f'<text x="{axes.sx(x) + (-3 if at_edge else 3):.1f}" y="{axes.sy(y) - 3:.1f}" font-size="8" '
                         f'fill="{color}"{anchor}>{escape(label)}</text>')
    return parts


def _legend_row(left: float, y: float, name: str, color: str, dash: str | None) -> str:
    dashed = f' stroke-dasharray="{dash}"' if dash else ""
    return (f'<line x1="{left}" y1="{y - 4}" x2="{left + 18}" y2="{y - 4}" stroke="{color}" stroke-width="2"{dashed}/>'
            f'<text x="{left + 24}" y="{y}" font-size="11" fill="{color}">{escape(name)}</text>')


def _size(svg: str, attribute: str) -> int:
    """A chart's own width or height, read back from its opening tag."""
    head = svg[: svg.index(">")]
    return int(head.split(f' {attribute}="', 1)[1].split('"', 1)[0])
