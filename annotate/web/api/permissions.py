"""API access rules, all answered by annotate.labeling.roles so pages and API agree.

Annotators reach only their own annotations; reviewers read everything; admins also write
and take data out (imports, exports). A user with no role gets 403 everywhere.
"""
from django.db.models import QuerySet
from rest_framework.permissions import BasePermission

from annotate.labeling import roles
from annotate.models import Annotation


def role_permission(role: str) -> type[BasePermission]:
    """A DRF permission: the user has `role` (or a higher one) in annotate.labeling.roles."""

    class HasRole(BasePermission):
        message = f"You need the {role} role."

        def has_permission(self, request, view) -> bool:
            return roles.has_role(request.user, role)

    HasRole.__name__ = HasRole.__qualname__ = f"Is{role.title()}"
    return HasRole


IsAnnotator = role_permission(roles.ANNOTATOR)
IsReviewer = role_permission(roles.REVIEWER)
IsAdmin = role_permission(roles.ADMIN)


class OwnAnnotationOrReviewer(BasePermission):
    """Object level: an annotation is its annotator's, and visible to reviewers and admins."""

    message = "This annotation belongs to someone else."

    def has_permission(self, request, view) -> bool:
        return roles.is_annotator(request.user)

    def has_object_permission(self, request, view, obj: Annotation) -> bool:
        return roles.is_reviewer(request.user) or obj.annotator_id == request.user.pk


def annotations_visible_to(user) -> QuerySet[Annotation]:
    """The one query for "which annotations may this user see" (others' are simply absent)."""
    qs = Annotation.objects.all()
    if roles.is_reviewer(user):
        return qs
    if roles.is_annotator(user):
        return qs.filter(annotator_id=user.pk)
    return qs.none()
