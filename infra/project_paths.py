"""The project part of a URL: `/p/<slug>/rest` is `rest` in the project `slug`.

The ground floor knows only the shape of such a path (the body limits and the web server read a
request's view before anything else does); which project a slug names, and who may open it, is
the labeling side's (annotate.web.project_urls).
"""
import re

PREFIX = "/p/"
_PROJECT_PATH = re.compile(r"^/p/(?P<slug>[a-z0-9][a-z0-9-]{0,48})(?P<rest>/.*)$", re.DOTALL)


def split(path: str) -> tuple[str | None, str]:
    """(slug, the path within the project), or (None, path) for a path outside any project."""
    found = _PROJECT_PATH.match(path)
    if found is None:
        return None, path
    return found["slug"], found["rest"]
