"""One rule for htmx views: which template a request gets."""
from django.http import HttpRequest


def is_partial(request: HttpRequest) -> bool:
    """Whether the request gets a part of its page: htmx asked, and not to restore history,
    which must rebuild the page from nothing."""
    return bool(request.htmx and not request.htmx.history_restore_request)


def page_or_partial(request: HttpRequest, template: str, partial: str) -> str:
    """The named partial for an htmx request (`is_partial`); the whole page otherwise."""
    return f"{template}#{partial}" if is_partial(request) else template
