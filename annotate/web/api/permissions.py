"""API access rules, all answered by annotate.labeling.roles so pages and API agree.

Every route is a project's (annotate.web.project_urls): a user who is not a member of it gets 404,
as on its pages. Annotators reach only their own annotations; reviewers read everything of the
project; admins also write and take data out (imports, exports). A member without the role gets 403.
"""
from django.db.models import QuerySet
from rest_framework.permissions import BasePermission

from annotate.labeling import roles
from annotate.labeling.roles import project_of
from annotate.models import Annotation, Project


def role_permission(role: str) -> type[BasePermission]:
    """A DRF permission: the user has `role` (or a higher one) in the request's project."""

    class HasRole(BasePermission):
        message = f"You need the {role} role."

        def has_permission(self, request, view) -> bool:
            if not request.user.is_authenticated:
                return False  # 401 or 403 as DRF answers the anonymous; a project is asked of members
            return roles.has_role(request.user, role, roles.project_of(request))

    HasRole.__name__ = HasRole.__qualname__ = f"Is{role.title()}"
    return HasRole


IsAnnotator = role_permission(roles.ANNOTATOR)
IsReviewer = role_permission(roles.REVIEWER)
IsAdmin = role_permission(roles.ADMIN)


class ReviewerSomewhere(BasePermission):
    """A reviewer (or admin) of at least one project, or a site admin: the API's map is for their scripts."""

    message = "You need the reviewer role in a project."

    def has_permission(self, request, view) -> bool:
        user = request.user
        return roles.is_site_admin(user) or (
            user.is_authenticated
            and any(roles.has_role(user, roles.REVIEWER, p) for p in Project.objects.visible_to(user)))


class OwnAnnotationOrReviewer(BasePermission):
    """Object level: an annotation is its annotator's, and visible to the project's reviewers and admins."""

    message = "This annotation belongs to someone else."

    def has_permission(self, request, view) -> bool:
        return IsAnnotator().has_permission(request, view)

    def has_object_permission(self, request, view, obj: Annotation) -> bool:
        return roles.is_reviewer(request.user, project_of(request)) or obj.annotator_id == request.user.pk


def annotations_visible_to(user, project: Project) -> QuerySet[Annotation]:
    """The one query for "which of the project's annotations may this user see" (others' are simply absent)."""
    qs = Annotation.objects.filter(project=project)
    if roles.is_reviewer(user, project):
        return qs
    if roles.is_annotator(user, project):
        return qs.filter(annotator_id=user.pk)
    return qs.none()
