"""The labeling side's data: the pool, annotations, the queue and background jobs."""
from annotate.models.auto_labels import ROLLOUT_METHODS, AutoLabelRun, AutoStepLabel, JudgeAnswer
from annotate.models.jobs import ExportJob, ImportJob
from annotate.models.labels import Annotation, Completion, FinishReason, ScreeningResult, StepLabel
from annotate.models.pool import Problem, SampleLine, Solution, Step
from annotate.models.project import Assistance, LabelingConfig
from annotate.models.projects import AmbiguousProject, Membership, Project, SettingsChange
from annotate.models.queue import Generation, QueueItem
from annotate.models.review import RatingOverride

__all__ = [
    "AmbiguousProject",
    "Membership",
    "Project",
    "ROLLOUT_METHODS",
    "SettingsChange",
    "Annotation",
    "Assistance",
    "AutoLabelRun",
    "AutoStepLabel",
    "Completion",
    "ExportJob",
    "FinishReason",
    "Generation",
    "ImportJob",
    "JudgeAnswer",
    "LabelingConfig",
    "Problem",
    "QueueItem",
    "RatingOverride",
    "SampleLine",
    "ScreeningResult",
    "Solution",
    "Step",
    "StepLabel",
]
