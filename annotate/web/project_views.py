"""A project's settings page (its admins): the rules, the campaign's policies and the guideline,
validated, each change recorded with who made it and when."""
from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from annotate.labeling import projects
from annotate.labeling.roles import admin_required, project_of
from annotate.models import LabelingConfig, QueueItem, SettingsChange


class SettingsForm(forms.ModelForm):
    name = forms.CharField(max_length=200)
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    guideline = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 8}),
                                help_text="A change is a new version, stamped on the annotations begun after it")

    class Meta:
        model = LabelingConfig
        fields = ["stop_at_first_error", "allow_human_completion", "overlap_k", "qc_rate", "screening_required",
                  "screening_pass_accuracy", "rescreen_on_guideline_change", "lease_seconds", "idle_seconds",
                  "assistance", "assistance_margin", "queue_size", "queue_per_problem", "selection_shares",
                  "promotion_min_gain", "promotion_min_solutions", "promotion_min_steps"]

    def clean_selection_shares(self) -> dict:
        shares = self.cleaned_data["selection_shares"]
        if not isinstance(shares, dict) or not shares:
            raise ValidationError('give shares as a JSON object, e.g. {"convincing_wrong": 0.5, "random": 0.5}')
        known = set(QueueItem.Reason.values)
        for name, share in shares.items():
            if name not in known:
                raise ValidationError(f"{name!r} is not a selection; the selections are: {', '.join(sorted(known))}")
            if not isinstance(share, int | float) or share < 0:
                raise ValidationError(f"the share of {name!r} must be a number >= 0")
        if sum(shares.values()) <= 0:
            raise ValidationError("the shares must add up to more than 0")
        return shares

    def clean_qc_rate(self) -> float:
        rate = self.cleaned_data["qc_rate"]
        if not 0 <= rate <= 1:
            raise ValidationError("a share of tasks: between 0 and 1")
        return rate


@admin_required
@require_http_methods(["GET", "POST"])
def project_settings(request: HttpRequest) -> HttpResponse:
    project = project_of(request)
    config = LabelingConfig.of(project)
    initial = {field: getattr(project, field) for field in projects.PROJECT_FIELDS}
    form = SettingsForm(request.POST or None, instance=config, initial=initial)
    if request.method == "POST" and form.is_valid():
        changes = projects.change_settings(project=project, user=request.user, values=form.cleaned_data)
        messages.success(request, f"Saved {len(changes)} change{'s' if len(changes) != 1 else ''}." if changes
                         else "Nothing changed.")
        return redirect("annotate:project-settings")
    return render(request, "annotate/project_settings.html", {
        "form": form, "project": project,
        "changes": SettingsChange.objects.filter(project=project).select_related("user")[:50],
    })
