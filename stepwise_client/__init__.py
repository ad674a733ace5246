"""Stepwise's PRM as a reward for RL trainers, over `POST /api/score`, with no Django or torch.

`prm_reward(prompts, completions, **kwargs) -> list[float]` has the signature of a reward
function of TRL's `GRPOTrainer`; `prm_step_rewards(...) -> list[list[float]]` gives one
reward per step for trainers that take dense rewards. Completions are sent whole; the server
splits them into steps with the splitter the rest of Stepwise uses, and answers each step's text.

Standard library only, installed on its own (`pip install ./stepwise_client`): nothing here
imports the server's packages (annotate, scoring, config, infra) or Django.
"""
from stepwise_client.client import StepwiseClient, StepwiseError, step_probabilities, step_texts
from stepwise_client.rewards import (
    AGGREGATIONS,
    EMPTY_REWARD,
    completion_text,
    make_prm_reward,
    make_prm_step_rewards,
    prm_reward,
    prm_step_rewards,
    prompt_text,
    score_answers,
    score_solutions,
    score_steps,
)

__all__ = [
    "AGGREGATIONS", "EMPTY_REWARD", "StepwiseClient", "StepwiseError", "completion_text", "make_prm_reward",
    "make_prm_step_rewards", "prm_reward", "prm_step_rewards", "prompt_text", "score_answers", "score_solutions",
    "score_steps", "step_probabilities", "step_texts",
]
