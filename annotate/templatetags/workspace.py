"""Template filters of the labeling pages."""
from django import template
from django.utils.safestring import SafeString, mark_safe

from annotate.labeling import roles
from steps import rendering
from steps.answers import strip_calculator_annotations

register = template.Library()

# Keyed by rating; an unrated step (None) finds no entry and gets the default.
RATING_FACES: dict[int | None, str] = {-1: "😞", 0: "😐", 1: "😎"}
RATING_WORDS: dict[int | None, str] = {-1: "wrong", 0: "neutral", 1: "good"}


@register.filter
def display_text(text: str | None) -> str:
    """Imported text as shown: GSM8K calculator annotations hidden (escaping stays on)."""
    return strip_calculator_annotations(text or "")


@register.filter
def rendered(text: str | None) -> SafeString:
    """Model or problem text as HTML: math for KaTeX, Markdown emphasis and lists (escaped first)."""
    return mark_safe(rendering.render(display_text(text)))  # safe: rendering escapes all data first


@register.filter
def preview(text: str | None, limit: int = 80) -> SafeString:
    """A one-line excerpt for table cells, cut between formulas, never inside one."""
    return mark_safe(rendering.preview(display_text(text), int(limit)))


@register.filter
def answer_math(answer: str | None) -> SafeString:
    """A final answer as inline math (or as text when it is words)."""
    return mark_safe(rendering.render_answer(display_text(answer)))


@register.filter
def face(rating: int | None) -> str:
    return RATING_FACES.get(rating, "·")


@register.filter
def rating_word(rating: int | None) -> str:
    return RATING_WORDS.get(rating, "unrated")


@register.filter
def signed(rating: int | None) -> str:
    return "" if rating is None else f"{rating:+d}" if rating else "0"


@register.filter
def percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


@register.filter
def at(values, index: int):
    """values[index] in a template (None when out of range)."""
    try:
        return values[index]
    except (IndexError, KeyError, TypeError):
        return None


@register.filter
def has_role(user, role: str) -> bool:
    return roles.has_role(user, role)


@register.filter
def seconds(ms: int | None) -> str:
    """Milliseconds as whole seconds for display."""
    return "" if ms is None else f"{ms / 1000:.0f} s"
