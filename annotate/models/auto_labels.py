"""Automatic step labels: what rollouts (Math-Shepherd, OmegaPRM) or an imported dataset say of a
step. Kept apart from human labels (`labels.py`) on purpose: training, review and export choose
human, automatic or both, and nothing ever reads one as the other.

A run is one labeling pass with its provenance (method, generator, parameters); each of its
step labels says how many of `n_rollouts` completions from the step's prefix reached the known
answer (`n_correct`). Math-Shepherd's hard label is `n_correct > 0`, its soft label
`n_correct / n_rollouts`; BetaPRM trains on the counts themselves. Imported labels without
counts (a ProcessBench first error, a Math-Shepherd `+`/`-` tag) store `soft` only.
"""
from django.db import models

from annotate.models.pool import Step
from annotate.models.projects import project_column


class AutoLabelRun(models.Model):
    class Method(models.TextChoices):
        MATH_SHEPHERD = "math_shepherd", "Math-Shepherd rollouts (every prefix)"
        OMEGAPRM = "omegaprm", "OmegaPRM binary search for the first error"
        IMPORTED = "imported", "Imported dataset labels"

    project = project_column()
    method = models.CharField(max_length=30, choices=Method.choices)
    # Who produced the labels: the generator's name for rollouts, the dataset for imports.
    source = models.CharField(max_length=200, blank=True)
    # Everything needed to reproduce the run: N, sampling parameters, prompt template, seed, file digest.
    params = models.JSONField(default=dict, blank=True)
    rollouts = models.PositiveBigIntegerField(default=0, help_text="Completions generated")
    tokens = models.PositiveBigIntegerField(default=0, help_text="Tokens generated")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.get_method_display()} run {self.pk} ({self.source})"


class AutoStepLabel(models.Model):
    run = models.ForeignKey(AutoLabelRun, on_delete=models.CASCADE, related_name="labels",
                            db_index=False)  # one_auto_label_per_run_and_step starts with it
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="auto_labels")
    n_rollouts = models.PositiveIntegerField(null=True, blank=True)
    n_correct = models.PositiveIntegerField(null=True, blank=True)
    # P(step is good) as the method estimates it: K/N for rollouts, 1.0 / 0.0 for an imported verdict.
    soft = models.FloatField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "step"], name="one_auto_label_per_run_and_step"),
            models.CheckConstraint(condition=models.Q(soft__gte=0.0, soft__lte=1.0), name="auto_label_soft_in_0_1"),
            models.CheckConstraint(
                condition=models.Q(n_correct__isnull=True) | models.Q(n_correct__lte=models.F("n_rollouts")),
                name="auto_label_k_at_most_n",
            ),
        ]

    def __str__(self) -> str:
        return f"Auto label of step {self.step_id} in run {self.run_id}: {self.soft:.2f}"

    @property
    def summary(self) -> str:
        """How a reviewer reads it: "3/4 reached the answer", or the inferred verdict."""
        if self.n_rollouts is not None and self.n_correct is not None:
            return f"{self.n_correct}/{self.n_rollouts}"
        return f"{'good' if self.hard else 'bad'} (inferred)" if self.run.method != "imported" else (
            f"{'good' if self.hard else 'bad'} (imported)")

    @property
    def counts(self) -> tuple[int, int]:
        """(K, N) as training reads this label: the rollout counts, or one vote from `soft` alone
        (an inferred or imported label)."""
        if self.n_rollouts is not None and self.n_correct is not None:
            return self.n_correct, self.n_rollouts
        return round(self.soft), 1

    @property
    def hard(self) -> bool:
        """Math-Shepherd's hard estimate: some completion from here reached the answer."""
        if self.n_correct is not None:
            return self.n_correct > 0
        return self.soft >= 0.5
