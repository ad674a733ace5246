"""The model side's data: PRM versions, their scores of the pool, and model jobs."""
from django.db import models
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from annotate.models import AutoLabelRun, Project, Solution, Step
from annotate.models.projects import project_column
from jobs.models import Held, Job


class ModelVersionQuerySet(models.QuerySet["ModelVersion"]):
    def with_current(self, project: Project) -> "ModelVersionQuerySet":
        """Each version with `is_current`: whether it is the project's current model (its
        CurrentModel row; `scoring.store.registry.current_model` reads the same row)."""
        return self.annotate(is_current=Exists(
            CurrentModel.objects.filter(project=project, model_version=OuterRef("pk"))))

    def lineage(self, project: Project) -> "ModelVersionQuerySet":
        """The versions a project's models page shows: those trained or registered in it, and its
        current model wherever that came from (another project, a public PRM)."""
        current = CurrentModel.objects.filter(project=project, model_version=OuterRef("pk"))
        return self.filter(Q(project=project) | Q(Exists(current)))

    def usable_in(self, project: Project) -> "ModelVersionQuerySet":
        """The versions a project may score with or make current: its lineage and the public PRMs
        (registered in no project)."""
        current = CurrentModel.objects.filter(project=project, model_version=OuterRef("pk"))
        return self.filter(Q(project=project) | Q(project__isnull=True) | Q(Exists(current)))


class ModelVersion(models.Model):
    class Kind(models.TextChoices):
        HEAD = "head", "Backbone + step head (ours)"
        STEP_TOKEN = "step_token", "Causal LM scoring good/bad tokens at a step tag"
        TOKEN_CLASSIFICATION = "token_classification", "Token-classification PRM (TRL)"
        REMOTE = "remote", "A PRM served at a vLLM-compatible /pooling endpoint"

    class Status(models.TextChoices):
        CANDIDATE = "candidate"
        PROMOTED = "promoted"
        REJECTED = "rejected"
        # The gate had too few held-out labels to tell (scoring/learning/promotion.py).
        NOT_ENOUGH_EVIDENCE = "not_enough_evidence", "Not enough evidence"
        RETIRED = "retired"

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=30, choices=Kind.choices, default=Kind.HEAD)
    path = models.CharField(max_length=500, help_text="Folder with safetensors weights (remote: the endpoint URL)")
    weights_sha256 = models.CharField(max_length=64)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    # Where the version was trained or registered; any project may make it its current model.
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                help_text="The project it was trained or registered in; empty: a public PRM")
    config = models.JSONField(default=dict, blank=True)
    metrics = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.CANDIDATE)
    trust_remote_code = models.BooleanField(default=False, help_text="Only an admin may set this")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ModelVersionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_untrained(self) -> bool:
        """A head never trained on labels (the default model, generation 0): its scores rank
        nothing yet. Its metrics say so (scoring.store.default_model)."""
        return self.metrics.get("untrained") is True or self.metrics.get("note") == "untrained head"

    @property
    def state(self) -> str:
        """What the version is now in a project, in words: a promoted version another one replaced is
        superseded. Current or superseded is the project's word: read from
        `ModelVersion.objects.with_current(project)`; without it a promoted version is "promoted"."""
        is_current = getattr(self, "is_current", None)
        if is_current:
            return "current"
        if self.status == self.Status.PROMOTED:
            return "promoted" if is_current is None else "superseded"
        return self.Status(self.status).label.lower()


class CurrentModel(models.Model):
    """The model a project scores its pool and selects its queue with: one per project, and one
    version may serve several projects."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="current_model")
    model_version = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="current_in")
    since = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.model_version} is current in {self.project}"


class StepScore(models.Model):
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="scores",
                             db_index=False)  # one_score_per_step_model starts with it
    model_version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="step_scores")
    p = models.FloatField()
    mean = models.FloatField(null=True, blank=True)
    sigma = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["step", "model_version"], name="one_score_per_step_model")]

    def __str__(self) -> str:
        return f"Score {self.p} of step {self.step_id} by model {self.model_version_id}"


class SolutionScore(models.Model):
    solution = models.ForeignKey(Solution, on_delete=models.CASCADE, related_name="scores",
                                 db_index=False)  # one_score_per_solution_model starts with it
    model_version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="solution_scores")
    product = models.FloatField()
    min = models.FloatField()
    last = models.FloatField()
    mean = models.FloatField()
    sigma = models.FloatField(null=True, blank=True, help_text="Mean step sigma, for distributional heads")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["solution", "model_version"], name="one_score_per_solution_model")
        ]

    def __str__(self) -> str:
        return f"Score of solution {self.solution_id} by model {self.model_version_id}"


class RescoreJob(Job):
    project = project_column()
    model_version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="rescore_jobs")
    chunks_total = models.PositiveIntegerField(default=0)
    chunks_done = models.PositiveIntegerField(default=0)
    rebuild_queue = models.BooleanField(default=True)
    # The generation the queue was rebuilt into when the job finished (null: not rebuilt).
    generation = models.IntegerField(null=True, blank=True)
    tokens_done = models.PositiveBigIntegerField(default=0)  # tokens through the model, from the done chunks
    started_at = models.DateTimeField(null=True, blank=True)

    progress_unit = "solutions"
    task_name = "scoring.tasks.rescore_task"

    def rates(self, *, now=None) -> dict:
        """Tokens and solutions per second since the job started, and the seconds left at
        that pace (None until a chunk is done)."""
        if self.started_at is None or not self.done:
            return {"tokens_per_second": None, "eta_seconds": None}
        end = self.finished_at or now or timezone.now()
        seconds = max((end - self.started_at).total_seconds(), 1e-3)
        left = max(self.total - self.done, 0)
        eta = None if self.is_finished else left / (self.done / seconds)
        return {"tokens_per_second": self.tokens_done / seconds, "eta_seconds": eta}


class JSONArrayLength(models.Func):
    """The length of a JSON array column, counted in the database."""

    function = "json_array_length"  # SQLite's
    output_field = models.IntegerField()

    def as_postgresql(self, compiler, connection, **extra):
        return super().as_sql(compiler, connection, function="jsonb_array_length", **extra)


class RescoreChunkQuerySet(models.QuerySet["RescoreChunk"]):
    def progress(self) -> dict[str, int]:
        """Of the done chunks: how many, their solutions and the tokens the model read, counted in
        the database (reading every done chunk's ids at each chunk's end grew with the square of
        the pool: 238 ms per chunk at the end of a 1M-solution job, against 7.7 ms)."""
        done = self.filter(state=RescoreChunk.State.DONE).aggregate(
            chunks_done=models.Count("pk"), done=models.Sum(JSONArrayLength("solution_ids")),
            tokens_done=models.Sum("tokens"))
        return {name: count or 0 for name, count in done.items()}


class RescoreChunk(Held):
    """A fixed slice of a rescore job's solutions. Its state, not a counter, records progress,
    so a chunk run twice (redelivery, resume after a crash) is counted once.

    A worker claims a chunk (pending -> running) with one guarded UPDATE, so of several
    workers handed the same chunk (redelivery, a resume) one scores it. The claim is held
    like a job's (`jobs.models.Held`: `claimed_by` and a `heartbeat_at` beaten by the holder's
    heartbeat thread), so a chunk whose worker died is taken over (`Held.claim`)."""

    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"  # the same word as JobState.RUNNING: the job heartbeat thread beats chunks too
        DONE = "done"

    job = models.ForeignKey(RescoreJob, on_delete=models.CASCADE, related_name="chunks",
                            db_index=False)  # unique_rescore_chunk starts with it
    index = models.PositiveIntegerField()
    solution_ids = models.JSONField(default=list)
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    tokens = models.PositiveIntegerField(default=0)  # tokens the model read for this chunk

    objects = RescoreChunkQuerySet.as_manager()

    class Meta:
        ordering = ["job", "index"]
        constraints = [models.UniqueConstraint(fields=["job", "index"], name="unique_rescore_chunk")]

    def __str__(self) -> str:
        return f"Chunk {self.index} of rescore job {self.job_id}"


class TrainingRun(Job):
    class Trigger(models.TextChoices):
        MANUAL = "manual"
        SCHEDULE = "schedule"

    project = project_column(db_index=False)  # one_training_run_per_project starts with it
    config = models.JSONField(default=dict, blank=True)
    parent = models.ForeignKey(ModelVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    result = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="training_runs"
    )
    loss_curve = models.JSONField(default=list, blank=True)
    log = models.TextField(blank=True)
    n_labels = models.PositiveIntegerField(default=0)
    # 1 while pending or running, NULL once finished: unique per project, so at most one row of a
    # project holds it. It is the lock: two schedulers firing at once get one run, not two, and
    # two projects train at once.
    active_slot = models.PositiveSmallIntegerField(null=True, blank=True, default=1, editable=False)
    trigger = models.CharField(max_length=20, choices=Trigger.choices, default=Trigger.MANUAL)
    # The promotion decision: metric, both values, promoted or not and why.
    gate = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)

    resumable = False  # a half-run training cannot be picked up: a redelivery leaves it alone
    finished_updates = {"active_slot": None}  # ending the run frees the single-run lock
    progress_unit = "steps"
    task_name = "scoring.tasks.train_prm_task"

    class Meta(Job.Meta):
        constraints = [
            # The slot is held exactly while the run is active, so a finished run frees it.
            models.CheckConstraint(
                condition=(
                    models.Q(state__in=["pending", "running"], active_slot=1)
                    | models.Q(state__in=["succeeded", "failed", "cancelled"], active_slot__isnull=True)
                ),
                name="training_run_slot_matches_state",
            ),
            models.UniqueConstraint(fields=["project", "active_slot"], name="one_training_run_per_project"),
        ]


class GenerationRun(Job):
    """N samples per problem from a policy model into the pool (`scoring.generation.runs`).

    What was asked is stored whole (problems, generator spec, sampling, template, seed), so a
    worker that resumes the run, and anyone reading a solution's provenance, sees the same.
    """

    project = project_column()
    problem_filter = models.JSONField(default=dict, blank=True, help_text='{"problem_ids": [...]} or '
                                      '{"source": ..., "split": ..., "limit": ...}')
    problem_ids = models.JSONField(default=list, blank=True, editable=False)  # resolved once, when planned
    samples_per_problem = models.PositiveIntegerField(default=4)
    generator_spec = models.JSONField(default=dict)
    generator_name = models.CharField(max_length=100, blank=True)
    sampling = models.JSONField(default=dict, blank=True, help_text="SamplingParams fields but n")
    prompt_template = models.TextField()
    split_mode = models.CharField(max_length=20, default="blank_line")  # steps.splitting.SPLIT_MODES
    seed = models.IntegerField(null=True, blank=True)
    chunk_size = models.PositiveIntegerField(default=8, help_text="Problems per chunk")
    # Totals of the done chunks, refreshed from their rows after each one.
    chunks_total = models.PositiveIntegerField(default=0)
    chunks_done = models.PositiveIntegerField(default=0)
    created = models.PositiveIntegerField(default=0)
    duplicates = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)  # samples with no steps, or over the size limits
    queued = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    retries = models.PositiveIntegerField(default=0)

    progress_unit = "problems"
    task_name = "scoring.tasks.generate_solutions_task"

    def __str__(self) -> str:
        return f"Generation run {self.pk} ({self.generator_name or self.generator_spec.get('backend', '?')})"


class GenerationChunk(models.Model):
    """A fixed slice of a run's problems; claimed as done (`jobs.models.claim`) in the same
    transaction that writes its solutions, so a chunk interrupted anywhere is either wholly in the
    pool or not at all, and of two attempts writing it one does."""

    class State(models.TextChoices):
        PENDING = "pending"
        DONE = "done"

    run = models.ForeignKey(GenerationRun, on_delete=models.CASCADE, related_name="chunks",
                            db_index=False)  # unique_generation_chunk starts with it
    index = models.PositiveIntegerField()
    problem_ids = models.JSONField(default=list)
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    created = models.PositiveIntegerField(default=0)
    duplicates = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)  # samples with no steps, or over the size limits
    queued = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    retries = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["run", "index"]
        constraints = [models.UniqueConstraint(fields=["run", "index"], name="unique_generation_chunk")]

    def __str__(self) -> str:
        return f"Chunk {self.index} of generation run {self.run_id}"


class RolloutLabelJob(Job):
    """Labeling solutions by rollouts into one AutoLabelRun (scoring.generation.rollout_labeling).

    The solutions are fixed when the job is created; each is labeled in one transaction that
    also adds its cost to the run, so a job resumed after a crash skips what is done and
    counts nothing twice. `done` counts labeled solutions (from the run's labels).
    """

    project = project_column()
    run = models.OneToOneField(AutoLabelRun, on_delete=models.CASCADE, related_name="job")
    generator_spec = models.JSONField(default=dict)
    solution_ids = models.JSONField(default=list)
    # What the full Math-Shepherd sweep would have cost on the labeled solutions (OmegaPRM's saving).
    full_sweep_rollouts = models.PositiveBigIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0, help_text="Solutions with no steps or no known answer")

    progress_unit = "solutions"
    task_name = "scoring.tasks.label_rollouts_task"

    def __str__(self) -> str:
        return f"Rollout labeling job {self.pk} ({self.run.method})"


class JudgeLabelJob(Job):
    """Asking a verifier model (a judge) for each step's verdict and critique, into one AutoLabelRun
    of method judge (scoring.generation.judge_labeling).

    The solutions are fixed when the job is created; each gets one JudgeAnswer (raw, parsed or
    not) in the transaction that stores its verdicts and adds its tokens to the run, so a job
    resumed after a crash skips what is answered and counts nothing twice. `done` counts answered
    solutions and `unparseable` those whose answer could not be read, both from the run's answers.
    """

    project = project_column()
    run = models.OneToOneField(AutoLabelRun, on_delete=models.CASCADE, related_name="judge_job")
    generator_spec = models.JSONField(default=dict)
    solution_ids = models.JSONField(default=list)
    skipped = models.PositiveIntegerField(default=0, help_text="Solutions asked for with no steps, or gold/reference")
    unparseable = models.PositiveIntegerField(default=0, help_text="Answers stored raw, no verdict read from them")

    progress_unit = "solutions"
    task_name = "scoring.tasks.label_judge_task"

    def __str__(self) -> str:
        return f"Judge labeling job {self.pk} ({self.run.source})"
