"""A project's members changed by its admins (the members page) or by the `add_user` command.

The role itself is granted and revoked by `roles`; this adds what a change by a person needs:
each change recorded with the project's settings changes (SettingsChange, the "member" field:
who was what before and after), and the rule that a project admin cannot leave their project
without a project admin. Site admins are not members and may always act, so a project can be
left with no project admin by them (or by the command, which is theirs); it is still theirs to
run.
"""
from __future__ import annotations

from django.db import transaction

from annotate.labeling import roles
from annotate.models import Membership, Project, SettingsChange

# The SettingsChange field a membership change is recorded under.
MEMBER_FIELD = "member"


class MembershipRefused(ValueError):
    """A change the project does not allow; `field` names the input it is about."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def members(project: Project):
    """The project's memberships with their users, by username."""
    return Membership.objects.filter(project=project).select_related("user").order_by("user__username")


def set_role(*, project: Project, user, role: str, by) -> tuple[Membership, str | None]:
    """Make `user` a member of `project` in `role`, or change the role they hold there; `by` is who
    asks (None for the command). Returns the membership and the role held before (None for a new
    member)."""
    if role not in roles.ROLES:
        raise MembershipRefused("role", f"{role!r} is not a role; the roles are: {', '.join(roles.ROLES)}")
    with transaction.atomic():
        before = _role_held(project, user)
        if before == roles.ADMIN and role != roles.ADMIN:
            _keep_an_admin(project, by, f"{user.get_username()} cannot stop being a project admin")
        membership = roles.grant_role(user, role, project)
        if before != role:
            _record(project, by, user, before, role)
    return membership, before


def remove(*, project: Project, user, by) -> str:
    """Take `user` out of `project`; returns the role they held. Membership.DoesNotExist when they
    are not a member of it."""
    with transaction.atomic():
        before = _role_held(project, user)
        if before is None:
            raise Membership.DoesNotExist(f"{user.get_username()} is not a member of {project.slug}")
        if before == roles.ADMIN:
            _keep_an_admin(project, by, f"{user.get_username()} cannot be removed", field="member")
        roles.revoke_role(user, project)
        _record(project, by, user, before, None)
    return before


def _role_held(project: Project, user) -> str | None:
    # The project's row is locked first, so two admins demoting each other at once are taken one
    # after the other and the second sees the first's change (no project is left without an admin).
    list(Project.objects.select_for_update().filter(pk=project.pk).values_list("pk", flat=True))
    return Membership.objects.filter(project=project, user=user).values_list("role", flat=True).first()


def _keep_an_admin(project: Project, by, refused: str, field: str = "role") -> None:
    """Refuse a change by a project admin that takes away the project's last project admin."""
    if by is None or roles.is_site_admin(by):
        return
    if Membership.objects.filter(project=project, role=roles.ADMIN).count() <= 1:
        raise MembershipRefused(field, f"{refused}: they are the last project admin of {project.name}; "
                                        "make someone else a project admin first")


def _record(project: Project, by, user, before: str | None, after: str | None) -> SettingsChange:
    return SettingsChange.objects.create(project=project, user=by, field=MEMBER_FIELD,
                                         old_value=_as_role(user, before), new_value=_as_role(user, after))


def _as_role(user, role: str | None) -> str:
    return "" if role is None else f"{user.get_username()} as {Membership.Role(role).label}"
