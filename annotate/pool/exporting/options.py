"""Which annotations an export takes: its options, checked up front, and the filtered queryset."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, time

from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from annotate.models import Annotation, FinishReason, Project

CHUNK_SIZE = 2000
# How the rows are written: JSON Lines, a Parquet dataset folder, or `Dataset.save_to_disk`'s.
CONTAINERS = ("jsonl", "parquet", "hf_dataset")
# Whose labels the rows carry (soft and TRL formats; PRM800K gains `auto_labels` extras): people, rollouts
# and imports (`automatic`), both apart, a verifier model alone (`judge`), or the steps where the sources
# named in `consensus` agree.
LABEL_SOURCES = ("human", "automatic", "both", "judge", "consensus")
# The sources a consensus export may compare (`annotate.labeling.sources`); Qwen's PRM study kept the
# steps where rollouts and an LLM judge agree.
CONSENSUS_SOURCES = ("human", "rollouts", "judge")
DEFAULT_CONSENSUS = ("rollouts", "judge")


class ExportError(ValueError):
    """Bad export options, with a message naming the option."""


# Generation numbers are 32-bit integer columns: a larger one would overflow the query (a 500), not match nothing.
MAX_GENERATION = 2**31 - 1


@dataclass(frozen=True)
class ExportOptions:
    """Which annotations go out, and how neutral (0) ratings count."""

    generations: tuple[int, ...] = ()
    since: datetime | None = None
    include_qc: bool = False
    finish_reasons: tuple[str, ...] = ()
    # PRM800K's 0 means "reasonable but not progress"; most PRM trainers count it as good.
    neutral_is_good: bool = True
    container: str = "jsonl"
    labels: str = "human"
    consensus: tuple[str, ...] = DEFAULT_CONSENSUS

    @classmethod
    def from_dict(cls, data: dict) -> ExportOptions:
        """Options from a dict (an ExportJob row, an API body, a form); other keys are ignored."""
        try:
            generations = tuple(int(g) for g in data.get("generations") or ())
        except (TypeError, ValueError):
            raise ExportError(f"generations: {data.get('generations')!r} is not a list of integers") from None
        if any(not 0 <= g <= MAX_GENERATION for g in generations):
            raise ExportError(f"generations: each must be between 0 and {MAX_GENERATION}")
        reasons = tuple(data.get("finish_reasons") or ())
        unknown = sorted(set(reasons) - set(FinishReason.values))
        if unknown:
            raise ExportError(
                f"finish_reasons: unknown {', '.join(map(str, unknown))}; expected {', '.join(FinishReason.values)}"
            )
        since = data.get("since")
        container = data.get("container") or "jsonl"
        if container not in CONTAINERS:
            raise ExportError(f"container: unknown {container!r}; expected one of {', '.join(CONTAINERS)}")
        labels = data.get("labels") or "human"
        if labels not in LABEL_SOURCES:
            raise ExportError(f"labels: unknown {labels!r}; expected one of {', '.join(LABEL_SOURCES)}")
        return cls(
            generations=generations,
            since=parse_since(since) if isinstance(since, str) and since else since or None,
            include_qc=bool(data.get("include_qc", False)),
            finish_reasons=reasons,
            neutral_is_good=bool(data.get("neutral_is_good", True)),
            container=container,
            labels=labels,
            consensus=parse_consensus(data.get("consensus")),
        )

    def to_dict(self) -> dict:
        data = asdict(self)
        data["generations"] = list(self.generations)
        data["finish_reasons"] = list(self.finish_reasons)
        data["consensus"] = list(self.consensus)
        data["since"] = self.since.isoformat() if self.since else None
        return data


def parse_consensus(value: object) -> tuple[str, ...]:
    """The sources a consensus must agree across: "rollouts,judge" or a list; two or more of
    CONSENSUS_SOURCES, each once (empty: the default, rollouts and judge)."""
    if not value:
        return DEFAULT_CONSENSUS
    parts = value.split(",") if isinstance(value, str) else value
    if not isinstance(parts, list | tuple) or not all(isinstance(part, str) for part in parts):
        raise ExportError(f"consensus: {value!r} is not a list of sources")
    named = tuple(dict.fromkeys(part.strip() for part in parts if part.strip()))
    unknown = [name for name in named if name not in CONSENSUS_SOURCES]
    if unknown:
        raise ExportError(f"consensus: unknown {', '.join(map(repr, unknown))}; "
                          f"expected two or more of {', '.join(CONSENSUS_SOURCES)}")
    if len(named) < 2:
        raise ExportError(f"consensus: {', '.join(named)} alone agrees with nothing; "
                          f"name two or more of {', '.join(CONSENSUS_SOURCES)}")
    return named


def parse_since(value: str) -> datetime:
    """A date or ISO datetime; naive values are read in the project's time zone."""
    parsed = parse_datetime(value)
    if parsed is None:
        day = parse_date(value)
        if day is None:
            raise ExportError(f"since: {value!r} is not a date (YYYY-MM-DD) or ISO datetime")
        parsed = datetime.combine(day, time.min)
    if timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed)
    return parsed


def selected_annotations(*, project: Project | None = None, options: ExportOptions) -> QuerySet[Annotation]:
    """The project's submitted annotations passing the filters, in a stable order (id)."""
    project = Project.objects.given(project)
    qs = Annotation.objects.filter(project=project).submitted()
    if options.generations:
        qs = qs.filter(generation__in=options.generations)
    if options.since:
        # Imported lines carry PRM800K's own timestamp; local ones may only have created_at.
        qs = qs.filter(Q(timestamp__gte=options.since) | Q(timestamp__isnull=True, created_at__gte=options.since))
    if not options.include_qc:
        qs = qs.filter(is_quality_control=False)
    if options.finish_reasons:
        qs = qs.filter(finish_reason__in=options.finish_reasons)
    return qs.order_by("id")
