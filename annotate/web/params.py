"""What the annotator and reviewer pages share about reading a request and refusing it.

A bad parameter is a `LabelingError` (annotate.labeling.refusals), the one error those pages
turn into a 400 with the reason; a refusal htmx shows as it is goes back as plain text.
"""
from typing import Literal, overload

from django.http import HttpResponse

from annotate.labeling.refusals import LabelingError


@overload
def int_param(data, name: str, *, optional: Literal[False] = False) -> int: ...
@overload
def int_param(data, name: str, *, optional: bool) -> int | None: ...
def int_param(data, name: str, *, optional: bool = False) -> int | None:
    """`data[name]` as an int; None for an empty optional one; LabelingError naming it otherwise."""
    value = data.get(name, "")
    if value in ("", None) and optional:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise LabelingError(f"{name} must be a whole number, not {value!r}") from None


def plain_text(message: str, *, status: int) -> HttpResponse:
    return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")
