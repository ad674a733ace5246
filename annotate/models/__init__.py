"""The labeling side's data: the pool, annotations, the queue and background jobs."""
from .auto_labels import AutoLabelRun, AutoStepLabel
from .jobs import ExportJob, ImportJob, JobState
from .labels import Annotation, Completion, FinishReason, ScreeningResult, StepLabel
from .pool import Problem, SampleLine, Solution, Step
from .project import LabelingConfig
from .queue import Generation, QueueItem
from .review import RatingOverride

__all__ = [
    "Annotation",
    "AutoLabelRun",
    "AutoStepLabel",
    "Completion",
    "ExportJob",
    "FinishReason",
    "Generation",
    "ImportJob",
    "JobState",
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
