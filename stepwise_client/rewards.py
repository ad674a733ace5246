"""Rewards for RL from completions: TRL's reward-function signature over the Stepwise client.

TRL's `GRPOTrainer` calls each reward function as `f(prompts=..., completions=..., **kwargs)`
and logs it under its `__name__`. Prompts and completions are strings (standard format) or
lists of chat messages (conversational format); both are read here. A completion is sent whole
and the server cuts it into steps with the splitter its imports and generation use, so the PRM
sees steps shaped like the ones it was trained on and this package needs nothing of the server.

A completion's reward is not computed here: /api/score answers each solution's `score` by the
server's one rule (`scoring.core.step_scores.aggregate`, what rescoring stores), and the reward is
the field the aggregation names.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stepwise_client.client import Answer, StepwiseClient, step_probabilities

# TRL's two formats: a string, or chat messages ({"role": ..., "content": ...}).
Message = Mapping[str, Any]
Text = str | Sequence[Message]

# The fields of /api/score's solution `score` a reward may be: a solution as good as its weakest
# step (min), every step right (product), the PRM's verdict after the last step (last), the mean.
AGGREGATIONS = ("min", "product", "last", "mean")
# A completion with no text (empty or whitespace only) has no step to score: it earns nothing,
# and is never sent. The server's splitter finds at least one step in any other text.
EMPTY_REWARD = 0.0


def check_aggregation(how: str) -> None:
    if how not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, not {how!r}")


def prompt_text(prompt: Text) -> str:
    """The problem of a prompt: a string as is; of chat messages, the last user message
    (system prompts and few-shot turns before it are not the problem)."""
    if isinstance(prompt, str):
        return prompt
    users = [m for m in prompt if m.get("role") == "user"]
    return _content((users or list(prompt))[-1].get("content"))


def completion_text(completion: Text) -> str:
    """The solution of a completion: a string as is; chat messages' contents joined."""
    if isinstance(completion, str):
        return completion
    return "\n\n".join(_content(m.get("content")) for m in completion)


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    # Multimodal messages: a list of parts; only the text parts are read.
    return "".join(part.get("text", "") for part in content or () if isinstance(part, dict))


def score_answers(
    prompts: Sequence[Text], completions: Sequence[Text], *, client: StepwiseClient | None = None,
    split: str = "auto",
) -> list[Answer | None]:
    """The server's answer for each completion (its steps, with their texts, and its solution
    score); None for one with no text, which is never sent."""
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
    client = client or StepwiseClient()
    items = [(prompt_text(p), completion_text(c)) for p, c in zip(prompts, completions, strict=True)]
    scorable = [i for i, (_, completion) in enumerate(items) if completion.strip()]
    answers: list[Answer | None] = [None] * len(items)
    sent = client.completion_answers([items[i] for i in scorable], split=split)
    for index, answer in zip(scorable, sent, strict=True):
        answers[index] = answer
    return answers


def score_steps(
    prompts: Sequence[Text], completions: Sequence[Text], *, client: StepwiseClient | None = None,
    split: str = "auto",
) -> list[list[float]]:
    """One reward per step of each completion (the PRM's probability that the step is right)."""
    answers = score_answers(prompts, completions, client=client, split=split)
    return [step_probabilities(answer) if answer else [] for answer in answers]


def score_solutions(
    prompts: Sequence[Text], completions: Sequence[Text], *, aggregation: str = "min",
    client: StepwiseClient | None = None, split: str = "auto",
) -> list[float]:
    """One reward per completion: the server's solution score named by `aggregation`."""
    check_aggregation(aggregation)
    answers = score_answers(prompts, completions, client=client, split=split)
    return [answer["score"][aggregation] if answer else EMPTY_REWARD for answer in answers]


# The reward functions proper. TRL passes `completion_ids`, `trainer_state` and every column of
# the dataset as keyword arguments, so they take no options of their own: a column named
# `split` or `client` must not change how they score. Options are bound by the make_ functions.

def prm_reward(prompts: Sequence[Text], completions: Sequence[Text], **kwargs: Any) -> list[float]:
    """TRL reward function: the minimum step probability, the client from STEPWISE_URL / STEPWISE_TOKEN."""
    return score_solutions(prompts, completions)


def prm_step_rewards(prompts: Sequence[Text], completions: Sequence[Text], **kwargs: Any) -> list[list[float]]:
    """Dense rewards: each completion's step probabilities."""
    return score_steps(prompts, completions)


def make_prm_reward(
    *, aggregation: str = "min", client: StepwiseClient | None = None, split: str = "auto"
) -> Callable[..., list[float]]:
    """A reward function bound to one aggregation, client and split mode, named for TRL's logs."""
    check_aggregation(aggregation)  # An unknown aggregation fails here, not mid-training.
    client = client or StepwiseClient()

    def reward(prompts: Sequence[Text], completions: Sequence[Text], **kwargs: Any) -> list[float]:
        return score_solutions(prompts, completions, aggregation=aggregation, client=client, split=split)

    reward.__name__ = f"stepwise_prm_{aggregation}"
    return reward


def make_prm_step_rewards(
    *, client: StepwiseClient | None = None, split: str = "auto"
) -> Callable[..., list[list[float]]]:
    """Dense rewards bound to one client and split mode."""
    client = client or StepwiseClient()

    def step_rewards(prompts: Sequence[Text], completions: Sequence[Text], **kwargs: Any) -> list[list[float]]:
        return score_steps(prompts, completions, client=client, split=split)

    step_rewards.__name__ = "stepwise_prm_steps"
    return step_rewards
