"""The dataset card (README.md) of a Parquet or `datasets` export: what each column means,
how labels were decided, the neutral rule, and what was read and left out."""
from __future__ import annotations

from django.utils import timezone

from annotate.pool import prm800k
from annotate.pool.exporting.formats.base import CONSENSUS_OUTCOMES, ExportFormat, ExportTally
from annotate.pool.exporting.options import ExportOptions


def type_name(feature) -> str:
    """A short type for the card: `string`, `list[bool]`, `struct{text, rating}`."""
    if isinstance(feature, dict):
        return "struct{" + ", ".join(feature) + "}"
    inner = getattr(feature, "feature", None)
    if inner is not None:
        return f"list[{type_name(inner)}]"
    return getattr(feature, "dtype", type(feature).__name__)


def dataset_card(*, format: ExportFormat, container: str, options: ExportOptions, tally: ExportTally, rows: int,
                 features) -> str:
    """The card of an export: the format's own words on its columns and labels, then the counts,
    the selection and how to load it."""
    neutral = "good (+1 and 0 are good)" if options.neutral_is_good else "bad (only +1 is good)"
    left_out = ", ".join(f"{n} {reason}" for reason, n in sorted(tally.skipped.items())) or "none"
    lines = ["---", f"pretty_name: Stepwise {format.name} export", "tags:", "- process-reward-model", "- step-labels"]
    if container == "parquet":
        lines += ["configs:", "- config_name: default", "  data_files:", "  - split: train",
                  "    path: data/train.parquet"]
    lines += ["---", "", f"# Stepwise export: {format.name}", "",
              f"{format.help}. Written by Stepwise on {timezone.now():%Y-%m-%d %H:%M} UTC.", "",
              "## Features", "", "| column | type | meaning |", "|---|---|---|"]
    lines += [f"| `{name}` | `{type_name(feature)}` | {format.columns.get(name, '')} |"
              for name, feature in features.items()]
    automatic = _source_semantics(format, options)
    lines += ["", "## Labels", "", format.semantics, "", *automatic,
              f"**Neutral rule**: a neutral (0) rating counts as {neutral}.", "",
              f"**Label source**: {_label_source(options)} (`human`: annotators only; `automatic`: automatic "
              "labels by rollouts or imported, never mixed with human ones; `both`: each row says which; `judge`: "
              "a verifier model's verdicts alone; `consensus`: only the steps the named sources agree on).", "",
              "## Counts", "", f"- rows: {rows}", f"- {format.unit} read: {tally.read}", f"- left out: {left_out}",
              *_total_time_counts(tally), *_consensus_counts(options, tally), "",
              "## Selection", "",
              f"- generations: {', '.join(map(str, options.generations)) or 'all'}",
              f"- since: {options.since.isoformat() if options.since else 'any time'}",
              f"- quality-control tasks: {'included' if options.include_qc else 'left out'}",
              f"- finish reasons: {', '.join(options.finish_reasons) or 'all'}", "",
              "## Loading", "", "```python", *_loading(container), "```", ""]
    return "\n".join(lines)


def _source_semantics(format: ExportFormat, options: ExportOptions) -> list[str]:
    """The format's words on the export's non-human labels, when it has them."""
    if options.labels in ("automatic", "both") and format.automatic_semantics:
        return [format.automatic_semantics, ""]
    if options.labels in ("judge", "consensus") and format.sourced_semantics:
        return [format.sourced_semantics, ""]
    return []


def _label_source(options: ExportOptions) -> str:
    if options.labels == "consensus":
        return f"consensus of {', '.join(options.consensus)}"
    return options.labels


def _consensus_counts(options: ExportOptions, tally: ExportTally) -> list[str]:
    """How many steps the consensus kept and dropped, by rule (`CONSENSUS_OUTCOMES`)."""
    if options.labels != "consensus":
        return []
    return [f"- consensus of {', '.join(options.consensus)}, steps:",
            *(f"  - {meaning}: {tally.consensus[outcome]}" for outcome, meaning in CONSENSUS_OUTCOMES.items())]


def consensus_counts(report: dict) -> list[tuple[str, int]]:
    """(what the rule did, steps) of a finished job's report, in the card's order (the database
    keeps no key order); empty for an export that was not a consensus."""
    counts = report.get("consensus") or {}
    return [(meaning, counts.get(outcome, 0)) for outcome, meaning in CONSENSUS_OUTCOMES.items()] if counts else []


TOTAL_TIME_SOURCES = {
    prm800k.ACTIVE: "the active time the labeling page measured",
    prm800k.CLAIM_TO_SUBMIT: "no time reported: from the claim to the submit",
    prm800k.IMPORTED: "the imported line's own value",
}


def _total_time_counts(tally: ExportTally) -> list[str]:
    if not tally.total_time:
        return []
    return ["- `total_time`: " + "; ".join(f"{n} {TOTAL_TIME_SOURCES.get(source, source)}"
                                            for source, n in sorted(tally.total_time.items()))]


def _loading(container: str) -> list[str]:
    if container == "parquet":
        return ["from datasets import load_dataset",
                'rows = load_dataset("parquet", data_files="data/train.parquet")["train"]']
    return ["from datasets import load_from_disk", 'rows = load_from_disk("THIS_FOLDER")']
