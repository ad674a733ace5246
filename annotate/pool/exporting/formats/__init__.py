"""The export formats, one module each, in one registry: what the export page, the commands, the
API, the export job, the containers and the dataset card read of a format.

Each module builds one `ExportFormat` (name, help, unit, rows, automatic rows, card text, column
types); adding a format is writing its module and naming it in `FORMATS` below.
"""
from __future__ import annotations

from annotate.models import ExportJob
from annotate.pool.exporting.formats import critique, openrlhf, prm800k, processbench, soft, trl
from annotate.pool.exporting.formats.base import ExportFormat
from annotate.pool.exporting.options import ExportError

FORMATS: dict[str, ExportFormat] = {
    f.name: f for f in (prm800k.FORMAT, trl.FORMAT, processbench.FORMAT, soft.FORMAT, openrlhf.FORMAT, critique.FORMAT)
}

# The job model sits below the pool, so it learns here what each format's progress counts.
ExportJob.units_by_format.update({f.name: f.unit for f in FORMATS.values()})


def get_format(name: str) -> ExportFormat:
    """The registered format of that name, or an ExportError naming the option and the choices."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ExportError(f"format: unknown {name!r}; expected one of {', '.join(FORMATS)}") from None


def check_format(name: str) -> str:
    return get_format(name).name


def choices() -> list[tuple[str, str]]:
    """(name, help) of every format, for a form's or a serializer's choices."""
    return [(f.name, f.help) for f in FORMATS.values()]
