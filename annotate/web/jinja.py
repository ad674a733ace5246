"""The Jinja2 environment of the labeling workspace's hot templates (templates/jinja2/).

A rating answers with the step rows it changed, and the task page is rendered on every submit:
in Django's template language that was the largest CPU cost of a request left (1.6 ms of a
4 ms rating), about ten times what Jinja2 takes for the same HTML. Every other page stays in
Django templates. Autoescaping is on (Django's Jinja2 backend sets it); the filters are the
ones the Django templates use (annotate/templatetags/workspace.py), so text renders the same.
"""
from functools import lru_cache

from django.urls import get_script_prefix, reverse
from jinja2 import Environment

from annotate.templatetags import workspace


def url(name: str, *args) -> str:
    return _reverse(get_script_prefix(), name, args)


# A task's page names 8 URLs of its annotation and a rating's answer 3; Django's reverse() costs
# about 25 µs each time, and a URL never changes while the process runs (the script prefix is
# part of the key).
@lru_cache(maxsize=4096)
def _reverse(prefix: str, name: str, args: tuple) -> str:
    return reverse(name, args=args)


def environment(**options) -> Environment:
    env = Environment(**options)
    env.globals.update(url=url)
    env.filters.update(rendered=workspace.rendered, rating_word=workspace.rating_word)
    return env
