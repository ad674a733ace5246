"""Project URLs: `/p/<slug>/...` is the project `slug`'s copy of every page and API route.

The URL conf has one set of routes; this middleware takes the project off the path, sets
`request.project`, and makes the project's prefix the script prefix while the request runs, so
every `reverse()` and `{% url %}` of its pages stays in the project (a project is mounted as a
site is under SCRIPT_NAME). A path outside any project is the sole project's while exactly one
exists (an install with one campaign keeps its URLs); with several, `request.project` is None
there and a project's pages answer 404 (annotate.labeling.roles.project_of). Who may open a
project is asked by the views, which know the user (API tokens are read there).
"""
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import get_script_prefix, set_script_prefix

from annotate.models import Project
from infra import project_paths
from infra.memo import ProcessMemo

# Every request asks: the projects are read once per process until one changes (infra/memo.py).
_by_slug: ProcessMemo[tuple[int, ...]] = ProcessMemo(seconds=60)
_projects: ProcessMemo[Project] = ProcessMemo(seconds=60)
_SOLE = ""  # the memo key of the sole project's id (no slug is empty)


def project_named(slug: str) -> Project | None:
    found = _by_slug.get(slug, lambda: tuple(Project.objects.filter(slug=slug).values_list("pk", flat=True)))
    return _project(found[0]) if found else None


def sole_project() -> Project | None:
    """The project while exactly one exists (made, as Project.objects.sole makes it, when none does)."""
    found = _by_slug.get(_SOLE, _first_two_ids)
    return _project(found[0]) if len(found) == 1 else None


def _first_two_ids() -> tuple[int, ...]:
    return tuple(Project.objects.values_list("pk", flat=True)[:2]) or (Project.objects.sole().pk,)


def _project(pk: int) -> Project:
    return _projects.get(pk, lambda: Project.objects.get(pk=pk))


class ProjectMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        slug, rest = project_paths.split(request.path_info)
        if slug is None:
            request.project = sole_project()  # type: ignore[attr-defined]
            return self.get_response(request)
        project = project_named(slug)
        if project is None:
            raise Http404("No such project.")
        request.project = project  # type: ignore[attr-defined]
        request.path_info = rest
        outer = get_script_prefix()
        set_script_prefix(f"{outer}p/{slug}/")
        try:
            return self.get_response(request)
        finally:
            set_script_prefix(outer)
