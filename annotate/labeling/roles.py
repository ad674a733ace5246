"""Who may do what. Roles are Django groups; staff and superusers count as admins.

One helper per question, used by every view, API permission and query, so the rules
live in one place; the view decorators (`admin_required` ...) are defined here too, and
every page module imports them from here.
"""
from collections.abc import Callable
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AbstractUser, AnonymousUser, Group
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.http.response import HttpResponseBase

from infra.memo import ProcessMemo

ANNOTATOR = "annotator"
REVIEWER = "reviewer"
ADMIN = "admin"
ROLES = (ANNOTATOR, REVIEWER, ADMIN)

User = AbstractUser | AnonymousUser
# A user's role names, read from their groups once per process while no user or group changes
# anywhere (infra/memo.py): one query of the few a rating save makes. A granted or revoked role
# applies at the next request; after this long at most where no signal is sent (QuerySet.update()).
ROLE_MEMO_SECONDS = 60
_roles_of: ProcessMemo[frozenset[str]] = ProcessMemo(seconds=ROLE_MEMO_SECONDS)


def has_role(user: User, role: str) -> bool:
    if not user.is_authenticated:
        return False
    if user.is_superuser or user.is_staff:
        return True
    roles = _roles(user)
    if role == ANNOTATOR:
        return bool(roles & {ANNOTATOR, REVIEWER, ADMIN})
    if role == REVIEWER:
        return bool(roles & {REVIEWER, ADMIN})
    return ADMIN in roles


def _roles(user) -> frozenset[str]:
    # Kept on the user object too: role checks run many times per request.
    if not hasattr(user, "_stepwise_roles"):
        user._stepwise_roles = _roles_of.get(
            user.pk, lambda: frozenset(user.groups.values_list("name", flat=True))
        )
    return user._stepwise_roles


def is_admin(user: User) -> bool:
    return has_role(user, ADMIN)


def is_reviewer(user: User) -> bool:
    return has_role(user, REVIEWER)


def is_annotator(user: User) -> bool:
    return has_role(user, ANNOTATOR)


def grant_role(user, role: str) -> None:
    """Put a saved user in the role's group; an admin also becomes a Django superuser.

    Superuser rather than staff with a list of permissions: an admin's work in the Django
    admin spans every app (users and groups, beat's retrain schedule, gold labels, tokens),
    and a permission list goes stale each time a model is added, bringing back "You don't
    have permission to view or edit anything". Admins already hold every power on the site.
    """
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    group, _ = Group.objects.get_or_create(name=role)
    user.groups.add(group)
    if role == ADMIN and not (user.is_staff and user.is_superuser):
        user.is_staff = user.is_superuser = True
        user.save(update_fields=["is_staff", "is_superuser"])
    user.__dict__.pop("_stepwise_roles", None)


View = Callable[..., HttpResponseBase]


def role_required(role: str) -> Callable[[View], View]:
    """Login first; then 403 (not a login loop) for users without the role."""

    def decorator(view: View) -> View:
        @login_required
        @wraps(view)
        def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponseBase:
            if not has_role(request.user, role):
                raise PermissionDenied(f"This page is for the {role} role.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


annotator_required = role_required(ANNOTATOR)
reviewer_required = role_required(REVIEWER)
admin_required = role_required(ADMIN)
