"""Who may do what. Roles are Django groups; staff and superusers count as admins.

One helper per question, used by every view, API permission and query, so the rules
live in one place.
"""
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group

ANNOTATOR = "annotator"
REVIEWER = "reviewer"
ADMIN = "admin"
ROLES = (ANNOTATOR, REVIEWER, ADMIN)

User = AbstractBaseUser | AnonymousUser


def has_role(user: User, role: str) -> bool:
    if not user.is_authenticated:
        return False
    if user.is_superuser or user.is_staff:
        return True
    # Cached on the user object: role checks run many times per request.
    if not hasattr(user, "_stepwise_roles"):
        user._stepwise_roles = set(user.groups.values_list("name", flat=True))
    if role == ANNOTATOR:
        return bool(user._stepwise_roles & {ANNOTATOR, REVIEWER, ADMIN})
    if role == REVIEWER:
        return bool(user._stepwise_roles & {REVIEWER, ADMIN})
    return ADMIN in user._stepwise_roles


def is_admin(user: User) -> bool:
    return has_role(user, ADMIN)


def is_reviewer(user: User) -> bool:
    return has_role(user, REVIEWER)


def is_annotator(user: User) -> bool:
    return has_role(user, ANNOTATOR)


def grant_role(user, role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    group, _ = Group.objects.get_or_create(name=role)
    user.groups.add(group)
    user.__dict__.pop("_stepwise_roles", None)
