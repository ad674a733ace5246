"""The Content-Security-Policy header: django-csp's middleware, with the policy built once.

django-csp builds the header from settings.CONTENT_SECURITY_POLICY on every response (0.12 ms,
0.6 ms of a labeled task's five requests). A process's settings do not change, so a response
that asks for nothing of its own (no nonce used, no per-view policy from django-csp's
decorators) gets the header it would build every time, built at start. Any other response is
left to django-csp, as are the debug pages it exempts.
"""
from __future__ import annotations

from csp import middleware as csp
from csp.constants import HEADER, HEADER_REPORT_ONLY
from csp.utils import build_policy
from django.conf import settings
from django.http import HttpRequest
from django.http.response import HttpResponseBase

# What django-csp's decorators (csp_exempt, csp_update, csp_replace, csp_override) leave on a
# response for its middleware to read.
_PER_VIEW = tuple(f"_csp_{kind}{ro}" for kind in ("exempt", "config", "update", "replace") for ro in ("", "_ro"))


class CSPMiddleware(csp.CSPMiddleware):
    def __init__(self, get_response):
        super().__init__(get_response)
        built = {HEADER: build_policy(), HEADER_REPORT_ONLY: build_policy(report_only=True)}
        self.headers = {header: policy for header, policy in built.items() if policy}
        # URL prefixes a policy leaves out are django-csp's to apply.
        self.excludes = any((getattr(settings, name, None) or {}).get("EXCLUDE_URL_PREFIXES")
                            for name in ("CONTENT_SECURITY_POLICY", "CONTENT_SECURITY_POLICY_REPORT_ONLY"))

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if self.excludes or settings.DEBUG or getattr(request, "_csp_nonce", None) is not None \
                or any(hasattr(response, name) for name in _PER_VIEW):
            return super().process_response(request, response)
        for header, policy in self.headers.items():
            if header not in response:
                response[header] = policy
        # As django-csp does: a nonce asked for after the header is written is an error, not a
        # nonce the policy does not allow.
        request.csp_nonce = csp.CheckableLazyObject(self._csp_nonce_post_response)  # type: ignore[attr-defined]
        return response
