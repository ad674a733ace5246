"""Machine step labels: what rollouts (Math-Shepherd, OmegaPRM), an imported dataset or a verifier
model (a judge) say of a step. Kept apart from human labels (`labels.py`) on purpose: training,
review and export choose human, automatic, judge or both, and nothing ever reads one as the other.

"Automatic" labels are those of rollouts and imports (`AutoStepLabel.objects.automatic()`), as
they always were; a judge's verdicts are a source of their own (`.judged()`), read only where
asked for by name, so adding a judge run changes no existing export, training run or queue.

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
        JUDGE = "judge", "A verifier model's verdicts"

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


# The methods whose labels are shares of rollouts (K of N continuations reached the answer).
ROLLOUT_METHODS = (AutoLabelRun.Method.MATH_SHEPHERD, AutoLabelRun.Method.OMEGAPRM)


class AutoStepLabelQuerySet(models.QuerySet):
    def automatic(self):
        """Rollout and imported labels: what "automatic" names everywhere (a judge's are apart)."""
        return self.exclude(run__method=AutoLabelRun.Method.JUDGE)

    def judged(self):
        """A verifier model's verdicts."""
        return self.filter(run__method=AutoLabelRun.Method.JUDGE)

    def rollouts(self):
        return self.filter(run__method__in=ROLLOUT_METHODS)


class AutoStepLabel(models.Model):
    run = models.ForeignKey(AutoLabelRun, on_delete=models.CASCADE, related_name="labels",
                            db_index=False)  # one_auto_label_per_run_and_step starts with it
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="auto_labels")
    n_rollouts = models.PositiveIntegerField(null=True, blank=True)
    n_correct = models.PositiveIntegerField(null=True, blank=True)
    # P(step is good) as the method estimates it: K/N for rollouts, 1.0 / 0.0 for an imported verdict,
    # the verdict's probability for a judge (from the server's logprobs, else 1.0 / 0.0).
    soft = models.FloatField()
    # A judge's words on this step (its verification chain); empty for rollouts and imports.
    critique = models.TextField(blank=True, default="")

    objects = AutoStepLabelQuerySet.as_manager()

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
        verdict = "good" if self.hard else "bad"
        if self.run.method == AutoLabelRun.Method.JUDGE:
            return f"{verdict} (judge, p={self.soft:.2f})"
        return f"{verdict} (inferred)" if self.run.method != "imported" else f"{verdict} (imported)"

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


class JudgeAnswer(models.Model):
    """A verifier model's whole answer on one solution in a judge run, kept raw whether it parsed or not.

    A parsed answer gives the run one AutoStepLabel per judged step (verdict and critique); an
    unparseable one (malformed, truncated, too long, no verdicts) gives none and says why in
    `error`: it is counted, never guessed. The raw text is cut at `MAX_TEXT_CHARS`.
    """

    MAX_TEXT_CHARS = 20_000

    run = models.ForeignKey(AutoLabelRun, on_delete=models.CASCADE, related_name="judge_answers",
                            db_index=False)  # one_judge_answer_per_run_and_solution starts with it
    solution = models.ForeignKey("annotate.Solution", on_delete=models.CASCADE, related_name="judge_answers")
    text = models.TextField(blank=True)
    parsed = models.BooleanField()
    error = models.CharField(max_length=300, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "solution"], name="one_judge_answer_per_run_and_solution"),
        ]

    def __str__(self) -> str:
        outcome = "parsed" if self.parsed else "unparseable"
        return f"Judge answer on solution {self.solution_id} in run {self.run_id} ({outcome})"
