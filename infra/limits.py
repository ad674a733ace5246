"""Bounded input: request bodies, uploads and JSON nesting, refused before they cost anything.

Two holes this closes. DRF's JSON parser reads the request stream itself, so Django's
``DATA_UPLOAD_MAX_MEMORY_SIZE`` (checked only by ``request.body``) never saw a 50 MB JSON
body; and ``json.loads`` recurses once per nesting level, so a body nested a few thousand
deep raised RecursionError, a 500, wherever it was parsed first (the CSRF check included).
``BodySizeLimitMiddleware`` answers an oversize body with 413 from its Content-Length,
before anything reads it; ``BoundedJSONParser`` reads at most the limit and checks the
depth as it decodes. ``loads_bounded`` is also what the importer decodes each line with.
"""
from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, resolve
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import JSONParser
from rest_framework.utils.json import strict_constant

from infra import project_paths


class TooDeep(ValueError):
    """JSON nested deeper than the limit."""


def loads_bounded(text: str | bytes, max_depth: int, **options) -> Any:
    """``json.loads(text)``, or TooDeep when arrays and objects nest more than `max_depth` deep.

    Never recurses past Python's limit: a nesting deep enough to hit it stops the C decoder
    with RecursionError, caught here. Cheap for ordinary input: with no more brackets than
    the limit the text cannot nest deeper, and only otherwise is the decoded value walked
    (its containers only, without recursion).
    """
    try:
        value = json.loads(text, **options)
    except RecursionError:
        raise TooDeep(f"nested deeper than {max_depth} levels") from None
    if _brackets(text) > max_depth and _depth(value) > max_depth:
        raise TooDeep(f"nested deeper than {max_depth} levels")
    return value


def _brackets(text: str | bytes) -> int:
    if isinstance(text, bytes):
        return text.count(b"[") + text.count(b"{")
    return text.count("[") + text.count("{")


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        container, depth = stack.pop()
        deepest = max(deepest, depth)
        children = container.values() if isinstance(container, dict) else container
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest if isinstance(value, (dict, list)) else 0


# The views that take file uploads. A multipart body sent anywhere else is held to the
# general limit: the CSRF check parses any POST body, files included, before the view runs.
UPLOAD_VIEWS = {"annotate:import-list", "api-import-list"}


def body_limit(request: HttpRequest) -> tuple[int, str]:
    """The most bytes this request's body may have, and the setting that says so."""
    return body_limit_for(request.path_info, request.META.get("CONTENT_TYPE", ""))


def body_limit_for(path: str, content_type: str) -> tuple[int, str]:
    """``body_limit`` from a request's path and Content-Type alone: the web server asks it when
    the headers are in, before it reads a byte of the body (infra/web_server.py)."""
    if content_type.startswith("multipart/form-data") and _view_name(path) in UPLOAD_VIEWS:
        return settings.STEPWISE_MAX_UPLOAD_BYTES, "STEPWISE_MAX_UPLOAD_BYTES"
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE, "STEPWISE_MAX_BODY_BYTES"


def _view_name(path: str) -> str | None:
    try:
        return resolve(project_paths.split(path)[1]).view_name
    except Resolver404:
        return None


def too_large_message(limit: int, setting: str) -> str:
    return f"request body too large: the limit is {limit:,} bytes ({setting})"


class BodySizeLimitMiddleware:
    """413 for a body whose Content-Length is over its limit, before any view or check reads it."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return HttpResponse("bad Content-Length", status=400, content_type="text/plain")
        limit, setting = body_limit(request)
        if length > limit:
            message = too_large_message(limit, setting)
            if project_paths.split(request.path_info)[1].startswith("/api/"):
                return JsonResponse({"detail": message}, status=413)
            return HttpResponse(message, status=413, content_type="text/plain")
        return self.get_response(request)


class RequestTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "request_too_large"


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser, reading at most DATA_UPLOAD_MAX_MEMORY_SIZE and refusing deep nesting."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1)
        if len(raw) > limit:
            raise RequestTooLarge(too_large_message(limit, "STEPWISE_MAX_BODY_BYTES"))
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            return loads_bounded(raw.decode(encoding), settings.STEPWISE_MAX_JSON_DEPTH,
                                 parse_constant=strict_constant if self.strict else None)
        except ValueError as exc:  # TooDeep, bad JSON, bad encoding
            raise ParseError(f"JSON parse error - {exc}") from None
