"""What a training run is asked to do: the training config, and the evaluation and gate options."""
from __future__ import annotations

from dataclasses import dataclass

from scoring.core import evaluation
from scoring.core.training_data import TrainConfig

DEFAULT_GATE_METRIC = "step_auc"


@dataclass
class RunOptions:
    """What a run is asked to do: the training config plus evaluation and gate options."""

    train: dict
    gate_metric: str = DEFAULT_GATE_METRIC
    # How much worse the new model may be and still pass; negative demands an improvement.
    tolerance: float = 0.0
    bon_max_problems: int = 32
    bon_max_candidates: int = 8

    @classmethod
    def parse(cls, data: dict | None) -> RunOptions:
        """Check a run's options now, so a typo fails the start, not the worker an hour later."""
        data = dict(data or {})
        options = cls(train=data.pop("train", {}), **{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown run option(s): {', '.join(sorted(unknown))}")
        TrainConfig.from_dict(options.train)
        if options.gate_metric not in evaluation.GATE_METRICS:
            raise ValueError(
                f"gate_metric={options.gate_metric!r}; expected one of {', '.join(evaluation.GATE_METRICS)}"
            )
        return options
