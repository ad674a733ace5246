"""Policy models: generators (local transformers, OpenAI-compatible servers; `backends` builds
either from a stored spec), generation runs that fill the pool, rollouts and rollout labeling.
"""
