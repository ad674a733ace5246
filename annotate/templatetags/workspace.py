"""Template filters of the labeling pages, and how the labeling page offers the ratings."""
import functools
import json
from dataclasses import dataclass

from django import template
from django.utils.safestring import SafeString, mark_safe

from annotate.labeling import roles
from steps import rendering
from steps.answers import strip_calculator_annotations
from steps.ratings import Rating

register = template.Library()


@dataclass(frozen=True)
class RatingButton:
    """How the labeling page offers one rating: its button, and the keys that press it."""

    rating: Rating
    name: str  # the button's class and what a screen reader hears: bad, neutral, good
    face: str
    sign: str  # as the page writes the value: −1, 0, +1
    meaning: str
    keys: tuple[str, ...]  # the first is the one the button's title names

    @property
    def value(self) -> int:
        return int(self.rating)


# Every rating, worst first. The page's script reads the keys and signs from the task's data
# attributes (RATING_KEYS, RATING_SIGNS), so a rating is added here, not in static/js/label.js.
RATING_BUTTONS = (
    RatingButton(Rating.NEGATIVE, "bad", "😞", "−1", "wrong or misleading", ("1", "-")),
    RatingButton(Rating.NEUTRAL, "neutral", "😐", "0", "fine but does not move forward", ("2", "0")),
    RatingButton(Rating.POSITIVE, "good", "😎", "+1", "correct and useful", ("3", "+", "=")),
)
RATING_KEYS = json.dumps({key: str(button.value) for button in RATING_BUTTONS for key in button.keys})
RATING_SIGNS = json.dumps({str(button.value): button.sign for button in RATING_BUTTONS})
# Keyed by rating; an unrated step (None) finds no entry and gets the default.
RATING_FACES: dict[int | None, str] = {button.rating: button.face for button in RATING_BUTTONS}
RATING_WORDS: dict[int | None, str] = {rating: rating.word for rating in Rating}


@register.filter
def display_text(text: str | None) -> str:
    """Imported text as shown: GSM8K calculator annotations hidden (escaping stays on)."""
    return strip_calculator_annotations(text or "")


@register.filter
def rendered(text: str | None) -> SafeString:
    """Model or problem text as HTML: math for KaTeX, Markdown emphasis and lists (escaped first)."""
    return mark_safe(rendering.render(display_text(text)))  # safe: rendering escapes all data first


@register.filter
def guideline(text: str | None) -> SafeString:
    """A project's guideline as HTML, as problem text is rendered (escaped first), calculator-like
    `<<...>>` kept: a guideline may quote one as an example."""
    return mark_safe(_guideline_html(text or ""))  # safe: rendering escapes all data first


# Every task page shows the guideline, often longer than the renderer's own memo takes.
@functools.lru_cache(maxsize=16)
def _guideline_html(text: str) -> str:
    return rendering.render(text)


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
def has_role(request, role: str) -> bool:
    """The signed-in user holds `role` in the request's project (False outside any project)."""
    project = getattr(request, "project", None)
    return project is not None and roles.has_role(request.user, role, project)


@register.filter
def seconds(ms: int | None) -> str:
    """Milliseconds as whole seconds for display."""
    return "" if ms is None else f"{ms / 1000:.0f} s"
