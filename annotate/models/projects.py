"""Projects: labeling campaigns side by side in one Stepwise, each with its pool, people and rules.

A project owns its pool (problems, solutions), generations and queue, and through them its
annotations, reviews, jobs and exports. Every service that reads or writes them takes a project;
`Project.objects.sole()` answers for the commands and pages that may leave it out, and only
while exactly one project exists: with several, leaving it out is an error naming the choices,
so nothing is read across projects by accident.
"""
from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

DEFAULT_SLUG = "default"
SLUG_VALIDATOR = RegexValidator(r"^[a-z0-9][a-z0-9-]{0,48}$",
                                "a slug is lowercase letters, digits and hyphens, starting with a letter or digit")


class AmbiguousProject(LookupError):
    """Several projects exist and none was named."""


class ProjectQuerySet(models.QuerySet["Project"]):
    def sole(self) -> Project:
        """The one project when exactly one exists (made, as `default`, when none does)."""
        projects = list(self.order_by("pk")[:2])
        if not projects:
            return self.get_or_create(slug=DEFAULT_SLUG, defaults={"name": "Default"})[0]
        if len(projects) > 1:
            raise AmbiguousProject(f"several projects exist; name one of: {', '.join(self.slugs())}")
        return projects[0]

    def given(self, project: Project | None) -> Project:
        """`project`, or the sole project when it is None (AmbiguousProject naming the choices with
        several): what a service's `project=None` means."""
        return project if project is not None else self.sole()

    def slugs(self) -> list[str]:
        return list(self.order_by("slug").values_list("slug", flat=True))

    def named(self, slug: str | None) -> Project:
        """The project `slug`, or the sole one when `slug` is None; LookupError naming the choices."""
        if slug is None:
            return self.sole()
        try:
            return self.get(slug=slug)
        except Project.DoesNotExist:
            raise LookupError(f"no project {slug!r}; the projects are: {', '.join(self.slugs()) or 'none'}") from None

    def visible_to(self, user) -> ProjectQuerySet:
        """The projects `user` may open: all of them for a site admin, else those they belong to."""
        if not user.is_authenticated:
            return self.none()
        if user.is_superuser or user.is_staff:
            return self.all()
        return self.filter(memberships__user_id=user.pk)


class Project(models.Model):
    name = models.CharField(max_length=200)
    slug = models.CharField(max_length=50, validators=[SLUG_VALIDATOR],
                            help_text="In the project's URLs (/p/<slug>/) and the commands' --project")
    description = models.TextField(blank=True)
    guideline = models.TextField(blank=True, help_text="What annotators are asked to do, shown on the labeling page")
    guideline_version = models.PositiveIntegerField(
        default=1, help_text="Stamped on every annotation; raised each time the guideline text changes")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ProjectQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        # A constraint, not unique=True, which adds a LIKE index nothing uses (tests/config/test_schema.py).
        constraints = [models.UniqueConstraint(fields=["slug"], name="unique_project_slug")]

    def __str__(self) -> str:
        return self.name


def sole_project_id() -> int:
    """Default of every `project` column: the sole project, so code that names none works while one
    exists, and fails with AmbiguousProject (naming the choices) once there are several."""
    return Project.objects.sole().pk


def project_column(**kwargs) -> models.ForeignKey:
    """The `project` column of a table a project owns."""
    return models.ForeignKey(Project, on_delete=models.PROTECT, default=sole_project_id, related_name="+", **kwargs)


class Membership(models.Model):
    """A user's role in one project. Site admins (staff, superusers) hold every role everywhere."""

    class Role(models.TextChoices):
        ANNOTATOR = "annotator", "annotator"
        REVIEWER = "reviewer", "reviewer"
        ADMIN = "admin", "project admin"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships",
                                db_index=False)  # one_membership_per_project starts with it
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="one_membership_per_project")]

    def __str__(self) -> str:
        return f"{self.user} is {self.get_role_display()} of {self.project}"


class SettingsChange(models.Model):
    """Who changed which of a project's settings, when, from what to what; a change of its members
    too (field `member`: "NAME as ROLE" before and after, annotate/labeling/members.py)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="settings_changes")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    field = models.CharField(max_length=100)
    old_value = models.TextField(blank=True)
    new_value = models.TextField(blank=True)
    changed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-changed_at", "-id"]

    def __str__(self) -> str:
        return f"{self.field}: {self.old_value} -> {self.new_value} ({self.project})"
