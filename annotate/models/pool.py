"""Problems and the model-written solutions whose steps people label."""
import hashlib
import json

from django.db import models

from annotate.models.projects import project_column
from steps import ratings

# The `source` of the demo pool that `seed_demo` makes: it is served after the user's own work.
DEMO_SOURCE = "demo"


def content_hash(*parts: object) -> str:
    """A stable fingerprint of content, so importing the same thing twice finds it."""
    blob = json.dumps(parts, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


class Problem(models.Model):
    project = project_column(db_index=False)  # unique_problem_content starts with it
    statement = models.TextField()
    ground_truth_solution = models.TextField(blank=True, null=True)
    ground_truth_answer = models.TextField(blank=True, null=True)
    source = models.CharField(max_length=100, blank=True, db_index=True)
    split = models.CharField(max_length=50, blank=True, db_index=True)
    content_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # The same text may sit in two projects: each holds it once.
        constraints = [models.UniqueConstraint(fields=["project", "content_hash"], name="unique_problem_content")]

    def __str__(self) -> str:
        return self.statement[:80]

    @staticmethod
    def hash_for(statement: str, ground_truth_answer: str | None) -> str:
        return content_hash(statement.strip(), (ground_truth_answer or "").strip())


class SolutionQuerySet(models.QuerySet):
    def wrong_answer(self) -> "SolutionQuerySet":
        return self.filter(is_correct=False)

    def right_answer(self) -> "SolutionQuerySet":
        return self.filter(is_correct=True)

    def unlabeled(self) -> "SolutionQuerySet":
        return self.exclude(annotations__status="submitted")

    def with_steps(self) -> "SolutionQuerySet":
        """Solutions that have at least one step. EXISTS, not a join on the steps: for a rescore
        chunk's 64 solutions PostgreSQL planned the join as a scan of every step of a
        100,000-solution pool (54 ms a chunk against 0.3 ms), and a join repeats each solution."""
        return self.filter(models.Exists(Step.objects.filter(solution_id=models.OuterRef("pk"))))

    def demo(self) -> "SolutionQuerySet":
        """The demo pool's solutions (seed_demo), which rank after every other solution in the queue."""
        return self.filter(source=DEMO_SOURCE)


class Solution(models.Model):
    # The problem's project, kept on the row: the queue, exports and rescoring select a project's
    # solutions by it without a join (written with the problem, never changed).
    project = project_column(db_index=False)  # unique_solution_content starts with it
    problem = models.ForeignKey(Problem, on_delete=models.CASCADE, related_name="solutions",
                                db_index=False)  # Meta's (problem, is_correct) index starts with it
    final_answer = models.TextField(blank=True, null=True, help_text="Answer extracted from the steps")
    # True / False / None: None when the answer could not be extracted or graded.
    is_correct = models.BooleanField(null=True, db_index=True)
    grading_note = models.CharField(max_length=200, blank=True)
    source = models.CharField(max_length=100, blank=True, db_index=True)
    generator = models.CharField(max_length=100, blank=True, db_index=True)
    is_reference = models.BooleanField(default=False, help_text="The problem's own ground-truth solution")
    # PRM800K `pre_generated_*` fields; verifier score as imported (not ours).
    pre_generated_answer = models.TextField(blank=True, null=True)
    pre_generated_verifier_score = models.FloatField(blank=True, null=True)
    is_gold = models.BooleanField(default=False, db_index=True, help_text="Quality-control item with gold step labels")
    meta = models.JSONField(default=dict, blank=True)
    # How many times the generator wrote this solution: identical responses are one solution
    # (labeled once), but majority vote and best-of-N count every sample. Set from the
    # solution's SampleLines by `importing`, never incremented; 1 for solutions made otherwise.
    sample_count = models.PositiveIntegerField(default=1)
    content_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = SolutionQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["problem", "is_correct"])]
        constraints = [models.UniqueConstraint(fields=["project", "content_hash"], name="unique_solution_content")]

    def __str__(self) -> str:
        return f"Solution {self.pk} of problem {self.problem_id}"

    @staticmethod
    def hash_for(problem_hash: str, steps: list[str]) -> str:
        return content_hash(problem_hash, [s.strip() for s in steps])


class SampleLine(models.Model):
    """One input line that brought a solution (its first sample or a duplicate): where it came from.

    Keyed on the file's content digest and line number (and the solution, so each project
    keeps its own), so importing the same file again finds its lines here and counts no sample
    twice, while another file's identical response is another sample. PRM800K lines are not
    recorded: a repeated PRM800K solution is another labeler's annotation of it, not another sample.
    """

    solution = models.ForeignKey(Solution, on_delete=models.CASCADE, related_name="sample_lines")
    file_digest = models.CharField(max_length=64)
    line_no = models.PositiveIntegerField()
    file_name = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # Per solution, so per project: the same file imported into two projects is a sample in
        # each. File first: an import looks its lines up by digest.
        constraints = [models.UniqueConstraint(fields=["file_digest", "line_no", "solution"],
                                               name="unique_sample_line_per_solution")]

    def __str__(self) -> str:
        return f"Line {self.line_no} of {self.file_name or self.file_digest[:12]} (solution {self.solution_id})"


class Step(models.Model):
    # Looked up through unique_step_index, which starts with it (tests/config/test_schema.py).
    solution = models.ForeignKey(Solution, on_delete=models.CASCADE, related_name="steps", db_index=False)
    index = models.PositiveIntegerField()
    text = models.TextField()
    # Gold label for quality control: a rating (None when not gold).
    gold_rating = models.SmallIntegerField(null=True, blank=True, choices=ratings.CHOICES)

    class Meta:
        ordering = ["solution", "index"]
        constraints = [models.UniqueConstraint(fields=["solution", "index"], name="unique_step_index")]

    def __str__(self) -> str:
        return f"Step {self.index} of solution {self.solution_id}"
