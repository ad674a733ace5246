"""A project's members page (its admins): who belongs to the project in which role; add an existing
user, change a member's role, remove a member. The rules and the record of each change are
annotate.labeling.members'; a refused change answers 400 with the page and the reason, naming the
field, and changes nothing."""
from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from annotate.labeling import members, roles
from annotate.labeling.roles import admin_required, project_of
from annotate.models import Membership, SettingsChange

ROLE_ERRORS = {"invalid_choice": f"'%(value)s' is not a role; the roles are: {', '.join(roles.ROLES)}"}


class AddMemberForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.ANNOTATOR,
                             error_messages=ROLE_ERRORS)

    def clean_username(self):
        username = self.cleaned_data["username"].strip()
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise ValidationError(f"no user named {username!r}: accounts are made with "
                                  "./stepwise manage add_user or in the Django admin")
        return user


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Membership.Role.choices, error_messages=ROLE_ERRORS)


@admin_required
@require_http_methods(["GET", "POST"])
def project_members(request: HttpRequest) -> HttpResponse:
    """The members and, on POST, a user added in a role (a member's role changed)."""
    project = project_of(request)
    form = AddMemberForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        person = form.cleaned_data["username"]
        try:
            _, before = members.set_role(project=project, user=person, role=form.cleaned_data["role"],
                                         by=request.user)
        except members.MembershipRefused as refusal:
            form.add_error(refusal.field, str(refusal))
        else:
            now = Membership.Role(form.cleaned_data["role"]).label
            messages.success(request, f"{person.get_username()} is {now}." if before else
                             f"Added {person.get_username()} as {now}.")
            return _after_change(request, person, form.cleaned_data["role"])
    errors = [f"{form[field].label}: {error}" for field, errs in form.errors.items() for error in errs]
    return _page(request, form, errors)


@admin_required
@require_POST
def member_role(request: HttpRequest, user_id: int) -> HttpResponse:
    """A member's role changed (a member of this project only: 404 otherwise)."""
    project = project_of(request)
    membership = get_object_or_404(Membership.objects.select_related("user"), project=project, user_id=user_id)
    form = RoleForm(request.POST)
    if not form.is_valid():
        return _page(request, AddMemberForm(), [f"Role of {membership.user.get_username()}: {error}"
                                                for error in form.errors["role"]])
    try:
        members.set_role(project=project, user=membership.user, role=form.cleaned_data["role"], by=request.user)
    except members.MembershipRefused as refusal:
        return _page(request, AddMemberForm(), [f"Role of {membership.user.get_username()}: {refusal}"])
    messages.success(request, f"{membership.user.get_username()} is "
                              f"{Membership.Role(form.cleaned_data['role']).label}.")
    return _after_change(request, membership.user, form.cleaned_data["role"])


@admin_required
@require_POST
def member_remove(request: HttpRequest, user_id: int) -> HttpResponse:
    """A member taken out of the project (a member of this project only: 404 otherwise)."""
    project = project_of(request)
    membership = get_object_or_404(Membership.objects.select_related("user"), project=project, user_id=user_id)
    try:
        members.remove(project=project, user=membership.user, by=request.user)
    except members.MembershipRefused as refusal:
        return _page(request, AddMemberForm(), [f"Remove {membership.user.get_username()}: {refusal}"])
    except Membership.DoesNotExist:  # removed by someone else since the page was read
        pass
    messages.success(request, f"Removed {membership.user.get_username()} from {project.name}.")
    return _after_change(request, membership.user, None)


def _after_change(request: HttpRequest, person, role: str | None) -> HttpResponse:
    """Back to the members page, unless the admin took that page away from themselves: then the
    project's home, or their projects (the top bar's link) once they are no longer a member."""
    if person.pk == request.user.pk and not roles.is_site_admin(request.user):
        if role is None:
            return redirect("/")
        if role != roles.ADMIN:
            return redirect("annotate:home")
    return redirect("annotate:project-members")


def _page(request: HttpRequest, form: AddMemberForm, errors: list[str]) -> HttpResponse:
    project = project_of(request)
    return render(request, "annotate/project_members.html", {
        "project": project, "form": form, "errors": errors, "roles": Membership.Role.choices,
        "members": members.members(project),
        "changes": SettingsChange.objects.filter(project=project, field=members.MEMBER_FIELD)
        .select_related("user")[:20],
    }, status=400 if errors else 200)
