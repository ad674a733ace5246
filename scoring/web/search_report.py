"""The latest search-curves report (`eval_search`), where the models page finds it, and its chart.

No torch here: the models page runs in the web process. The report is a JSON file under
DATA_DIR, written whole by `eval_search` (an interrupted run leaves the previous one).
"""
from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings
from django.utils.safestring import SafeString

from scoring.web.charts import line_chart

REPORT_NAME = "search-eval"


def report_path() -> Path:
    return settings.DATA_DIR / "reports" / f"{REPORT_NAME}.json"


def write(report: dict, path: Path | None = None) -> Path:
    """Write a report atomically (a temporary file renamed), so a reader never sees half of one."""
    path = path or report_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(report, indent=2) + "\n")
    partial.replace(path)
    return path


def latest() -> dict | None:
    """The latest report, or None when there is none (or it cannot be read)."""
    try:
        return json.loads(report_path().read_text())
    except (OSError, ValueError):
        return None


def chart(report: dict) -> SafeString:
    """Accuracy against generated tokens, one line per method, as the models page's inline SVG."""
    series = [(name, [(p["tokens"], p["accuracy"]) for p in points]) for name, points in report["curves"].items()]
    return line_chart(series, x_label="generated tokens per problem", y_label="accuracy", y_range=(0.0, 1.0),
                      width=560)
