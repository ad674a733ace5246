"""One rule for htmx views: which template a request gets."""
from typing import cast

from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """A request as django-htmx's HtmxMiddleware (config/settings.py) leaves every one: `htmx`
    says what htmx asked for. For annotating views (django-htmx's documented pattern); no
    request is of this class."""

    htmx: HtmxDetails


def is_partial(request: HttpRequest) -> bool:
    """Whether the request gets a part of its page: htmx asked, and not to restore history,
    which must rebuild the page from nothing."""
    htmx = cast(HtmxHttpRequest, request).htmx  # Set on every request by HtmxMiddleware.
    return bool(htmx and not htmx.history_restore_request)


def page_or_partial(request: HttpRequest, template: str, partial: str) -> str:
    """The named partial for an htmx request (`is_partial`); the whole page otherwise."""
    return f"{template}#{partial}" if is_partial(request) else template
