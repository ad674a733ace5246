"""Bounded input: request bodies, uploads and JSON nesting, refused before they cost anything.

Two holes this closes. DRF's JSON parser reads the request stream itself, so Django's
``DATA_UPLOAD_MAX_MEMORY_SIZE`` (checked only by ``request.body``) never saw a 50 MB JSON
body; and ``json.loads`` recurses once per nesting level, so a body nested a few thousand
deep raised RecursionError, a 500, wherever it was parsed first (the CSRF check included).
``BodySizeLimitMiddleware`` answers an oversize body with 413 from its Content-Length,
before anything reads it; ``BoundedJSONParser`` reads at most the limit and checks the
depth before decoding. ``json_depth_exceeds`` is also what the importer checks each line with.
"""
from __future__ import annotations

import re

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import JSONParser
from rest_framework.utils import json

# Strings are removed before brackets are counted: a "[" inside a string nests nothing.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")


def json_depth_exceeds(raw: bytes, limit: int) -> bool:
    """Whether the JSON text `raw` nests arrays and objects more than `limit` deep.

    Fast for ordinary input: with no more brackets than the limit it cannot nest deeper,
    and only then are strings stripped and brackets scanned (in C, by `re`).
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    depth = 0
    for bracket in _BRACKET.finditer(_JSON_STRING.sub(b"", raw)):
        if bracket.group() in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def body_limit(request: HttpRequest) -> tuple[int, str]:
    """The most bytes this request's body may have, and the setting that says so.

    Uploads (multipart) get the upload limit; every other body the general one.
    """
    if request.META.get("CONTENT_TYPE", "").startswith("multipart/form-data"):
        return settings.STEPWISE_MAX_UPLOAD_BYTES, "STEPWISE_MAX_UPLOAD_BYTES"
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE, "STEPWISE_MAX_BODY_BYTES"


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
            if request.path.startswith("/api/"):
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
        depth = settings.STEPWISE_MAX_JSON_DEPTH
        if json_depth_exceeds(raw, depth):
            raise ParseError(f"JSON parse error - nested deeper than {depth} levels")
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            return json.loads(raw.decode(encoding), parse_constant=json.strict_constant if self.strict else None)
        except (ValueError, RecursionError) as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
