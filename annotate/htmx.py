"""One rule for htmx views: which template a request gets."""
from django.http import HttpRequest


def page_or_partial(request: HttpRequest, template: str, partial: str) -> str:
    """The named partial for an htmx request; the whole page otherwise, and for a history
    restore, which must rebuild the page from nothing."""
    if request.htmx and not request.htmx.history_restore_request:
        return f"{template}#{partial}"
    return template
