"""Stepwise's PRM as a reward for RL trainers, over `POST /api/score`, with no Django or torch.

`prm_reward(prompts, completions, **kwargs) -> list[float]` has the signature of a reward
function of TRL's `GRPOTrainer`; `prm_step_rewards(...) -> list[list[float]]` gives one
reward per step for trainers that take dense rewards. Completions are split into steps by
`annotate.text.splitting.split_steps`, the splitter the rest of Stepwise uses.
"""
from stepwise_client.client import StepwiseClient, StepwiseError
from stepwise_client.rewards import (
    AGGREGATIONS,
    completion_text,
    make_prm_reward,
    make_prm_step_rewards,
    prm_reward,
    prm_step_rewards,
    prompt_text,
    score_answers,
    score_solutions,
    score_steps,
    solution_steps,
)

__all__ = [
    "AGGREGATIONS", "StepwiseClient", "StepwiseError", "make_prm_reward", "prm_reward",
    "completion_text", "make_prm_step_rewards",
    "prm_step_rewards", "prompt_text", "score_answers", "score_solutions", "score_steps", "solution_steps",
]
