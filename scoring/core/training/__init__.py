"""Fine-tune a PRM on collected step labels: point (BCE) and BetaPRM heads.

Plain PyTorch/transformers with dataclass configs (no Django): the Django side
(`scoring/learning/retraining.py`) turns labels into `LabeledRow`s and stores what `train()` returns.

Labels follow PRM800K: every step up to and including an annotator's first -1 is
supervised, later steps carry no label; a neutral (0) counts as positive by default
("Let's Verify Step by Step" found that best). Several annotators (or rollouts) of one
step give K positive out of N; the point head fits a binomial (BCE for N = 1), the beta head
a beta-binomial with a learned concentration kappa ("Process Rewards with Learned
Reliability"), so sigma = sqrt(mu(1-mu)/(kappa+1)) says how reliable mu is.

With a frozen backbone (the CPU default) the hidden states at the separator positions
are computed once per (solution, backbone, layer) and cached on disk, so retraining the
head is seconds of linear algebra.

The package is split by stage: `losses` (label tensors, point and beta-binomial losses,
the head's start), `features` (the frozen backbone, truncation, fingerprints and the
on-disk feature cache), `loop` (head-only and backbone training) and `checkpoints`
(writing a version's folder). The names callers use are re-exported here.
"""

from scoring.core.training.checkpoints import save_checkpoint
from scoring.core.training.features import (
    FeatureCache,
    backbone_fingerprint,
    decoder_layers_owner,
    default_layer,
    load_backbone,
    step_probabilities,
    truncated,
)
from scoring.core.training.loop import Progress, TrainResult, seed_everything, train
from scoring.core.training.losses import (
    KAPPA_EPS,
    StepTensors,
    beta_binomial_nll,
    beta_loss,
    head_loss,
    head_optimizer,
    inverse_softplus,
    new_head,
    point_loss,
    step_tensors,
)
from scoring.core.training_data import Example, LabeledRow, TrainConfig

__all__ = [
    "Example",
    "FeatureCache",
    "KAPPA_EPS",
    "LabeledRow",
    "Progress",
    "StepTensors",
    "TrainConfig",
    "TrainResult",
    "backbone_fingerprint",
    "beta_binomial_nll",
    "beta_loss",
    "decoder_layers_owner",
    "default_layer",
    "head_loss",
    "head_optimizer",
    "inverse_softplus",
    "load_backbone",
    "new_head",
    "point_loss",
    "save_checkpoint",
    "seed_everything",
    "step_probabilities",
    "step_tensors",
    "train",
    "truncated",
]
