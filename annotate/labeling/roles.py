"""Who may do what, in which project. A user holds one role per project (a Membership); site
admins (staff, superusers) hold every role in every project.

One helper per question, used by every view, API permission and query, so the rules live in one
place; the view decorators (`admin_required` ...) are defined here too, and every page module
imports them from here. A page or API route of a project answers 404 to a user who is not a member
of it (the project is not theirs to know of), and 403 to a member without the role.
"""
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AbstractUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest
from django.http.response import HttpResponseBase

from annotate.models import Membership, Project
from infra.memo import ProcessMemo

ANNOTATOR = Membership.Role.ANNOTATOR.value
REVIEWER = Membership.Role.REVIEWER.value
ADMIN = Membership.Role.ADMIN.value
ROLES = (ANNOTATOR, REVIEWER, ADMIN)
_RANK = {role: rank for rank, role in enumerate(ROLES)}  # each role may do what the ones before it may

User = AbstractUser | AnonymousUser
# A user's roles, project by project, read once per process while no membership or user changes
# anywhere (infra/memo.py): one query of the few a rating save makes. A granted or revoked role
# applies at the next request; after this long at most where no signal is sent (QuerySet.update()).
ROLE_MEMO_SECONDS = 60
_roles_of: ProcessMemo[tuple[tuple[int, str], ...]] = ProcessMemo(seconds=ROLE_MEMO_SECONDS)


def is_site_admin(user: User) -> bool:
    return user.is_authenticated and (user.is_superuser or user.is_staff)


def role_in(user: User, project: Project | None = None) -> str | None:
    """The user's role in the project (the sole one when None): a site admin's is admin; None for a
    non-member."""
    if not user.is_authenticated:
        return None
    if is_site_admin(user):
        return ADMIN
    return _roles(user).get(Project.objects.given(project).pk)


def is_member(user: User, project: Project | None = None) -> bool:
    return role_in(user, project) is not None


def has_role(user: User, role: str, project: Project | None = None) -> bool:
    """The user holds `role`, or one above it, in the project."""
    held = role_in(user, project)
    return held is not None and _RANK[held] >= _RANK[role]


def _roles(user) -> dict[int, str]:
    # Kept on the user object too: role checks run many times per request.
    if not hasattr(user, "_stepwise_roles"):
        pairs = _roles_of.get(user.pk, lambda: tuple(Membership.objects.filter(user_id=user.pk)
                                                     .values_list("project_id", "role")))
        user._stepwise_roles = dict(pairs)
    return user._stepwise_roles


def is_admin(user: User, project: Project | None = None) -> bool:
    return has_role(user, ADMIN, project)


def is_reviewer(user: User, project: Project | None = None) -> bool:
    return has_role(user, REVIEWER, project)


def is_annotator(user: User, project: Project | None = None) -> bool:
    return has_role(user, ANNOTATOR, project)


def grant_role(user, role: str, project: Project | None = None) -> Membership:
    """Make a saved user a member of the project (the sole one when None) in `role`, replacing a role
    they held there. Site admins are made with `make_site_admin`: a project admin administers
    their project, not the site."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    project = project or Project.objects.sole()
    membership, _ = Membership.objects.update_or_create(project=project, user=user, defaults={"role": role})
    user.__dict__.pop("_stepwise_roles", None)
    return membership


def revoke_role(user, project: Project) -> None:
    """The user is no longer a member of the project (their labels stay theirs)."""
    Membership.objects.filter(project=project, user=user).delete()
    user.__dict__.pop("_stepwise_roles", None)


def make_site_admin(user) -> None:
    """A site admin: every role in every project, creates projects, and uses the Django admin.

    Superuser rather than staff with a list of permissions: a site admin's work in the Django
    admin spans every app (users, beat's retrain schedule, gold labels, tokens), and a permission
    list goes stale each time a model is added."""
    if not (user.is_staff and user.is_superuser):
        user.is_staff = user.is_superuser = True
        user.save(update_fields=["is_staff", "is_superuser"])


View = Callable[..., HttpResponseBase]


def project_of(request: Any) -> Project:
    """The request's project (annotate.web.project_urls), 404 when the URL names none and there
    are several, or when the user is not a member of it."""
    project = getattr(request, "project", None)
    if project is None:
        raise Http404("Choose a project: its pages are under /p/<project>/.")
    if not is_member(request.user, project):
        raise Http404("No such project.")
    return project


def role_required(role: str) -> Callable[[View], View]:
    """Login first; then 404 for a non-member of the request's project, 403 (not a login loop) for
    a member without the role."""

    def decorator(view: View) -> View:
        @login_required
        @wraps(view)
        def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponseBase:
            if not has_role(request.user, role, project_of(request)):
                raise PermissionDenied(f"This page is for the {role} role.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


annotator_required = role_required(ANNOTATOR)
reviewer_required = role_required(REVIEWER)
admin_required = role_required(ADMIN)
