"""The Jinja2 environment of the labeling pages (templates/jinja2/): the task page, its parts that
htmx swaps, and the page between tasks.

A rating answers with the step rows it changed, and the task page is rendered on every submit:
in Django's template language that was the largest CPU cost of a request left (1.6 ms of a
4 ms rating), about ten times what Jinja2 takes for the same HTML. So the labeling screen is
Jinja2 from its layout (templates/jinja2/layout.jinja, the site's base.html written the same
way) down; every other page stays in Django templates. Autoescaping is on (Django's Jinja2
backend sets it); the filters are the ones the Django templates use
(annotate/templatetags/workspace.py), so text renders the same.
"""
from functools import lru_cache

from django.conf import settings
from django.contrib.messages import get_messages
from django.middleware.csrf import get_token
from django.templatetags.static import static
from django.urls import get_script_prefix, reverse
from django.utils.functional import SimpleLazyObject
from django.utils.html import format_html
from django_htmx.jinja import django_htmx_script
from jinja2 import Environment, FileSystemBytecodeCache

from annotate.labeling.tasks import StepState
from annotate.models import FinishReason
from annotate.templatetags import workspace
from steps.ratings import Rating


def url(name: str, *args) -> str:
    return _reverse(get_script_prefix(), name, args)


# A task's page names 8 URLs of its annotation and a rating's answer 3; Django's reverse() costs
# about 25 µs each time, and a URL never changes while the process runs (the script prefix is
# part of the key).
@lru_cache(maxsize=4096)
def _reverse(prefix: str, name: str, args: tuple) -> str:
    return reverse(name, args=args)


def static_url(path: str) -> str:
    return _static(settings.STATIC_URL, path)


# A page names 7 static files; each of Django's static() costs about 40 µs, and a file's URL
# does not change while the process runs (STATIC_URL is part of the key).
@lru_cache(maxsize=256)
def _static(prefix: str, path: str) -> str:
    return static(path)


def one_csrf_token(request) -> dict:
    """`csrf_token` and `csrf_input` with one masked token for the whole page, made only if the
    page uses one. Django's own mask a new token at each use (a task's page used three): the
    mask protects a response's token from BREACH, and one per response does that as well."""
    token = SimpleLazyObject(lambda: get_token(request))
    field = SimpleLazyObject(lambda: format_html('<input type="hidden" name="csrfmiddlewaretoken" value="{}">',
                                                 str(token)))
    return {"csrf_token": token, "csrf_input": field}


def environment(**options) -> Environment:
    # Templates compiled once per data dir, not once per process: a worker's first labeling page
    # loads them instead of compiling them (about 15 ms). Jinja2 checks each against its source.
    cache = settings.DATA_DIR / "jinja2"
    cache.mkdir(parents=True, exist_ok=True)
    env = Environment(bytecode_cache=FileSystemBytecodeCache(str(cache)), **options)
    env.globals.update(url=url, static=static_url, messages=get_messages, django_htmx_script=django_htmx_script,
                       FinishReason=FinishReason, StepState=StepState, Rating=Rating,
                       rating_buttons=workspace.RATING_BUTTONS, rating_keys=workspace.RATING_KEYS,
                       rating_signs=workspace.RATING_SIGNS)
    env.filters.update(rendered=workspace.rendered, answer_math=workspace.answer_math,
                       rating_word=workspace.rating_word, has_role=workspace.has_role,
                       guideline=workspace.guideline)
    return env
