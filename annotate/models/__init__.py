"""The labeling side's data: the pool, annotations, the queue and background jobs."""
from .jobs import ExportJob, ImportJob, JobState
from .labels import Annotation, Completion, FinishReason, StepLabel
from .pool import Problem, Solution, Step
from .queue import Generation, QueueItem

__all__ = [
    "Annotation",
    "Completion",
    "ExportJob",
    "FinishReason",
    "Generation",
    "ImportJob",
    "JobState",
    "Problem",
    "QueueItem",
    "Solution",
    "Step",
    "StepLabel",
]
