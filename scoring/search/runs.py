"""PRM-guided search for the API and the `search` command: the Django side of `scoring.search`.

Which generator a search uses: the local causal-LM folder the `search` command names
(`--generator`), else the PRM version's own backbone folder, a causal LM for the default
SmolLM2 model. Both the PRM (through the registry's LRU) and the generator are loaded once
per worker process.
"""
from __future__ import annotations

import threading

from django.conf import settings

from scoring import search
from scoring.core.model_files import backbone_folder, read_model_config
from scoring.generation import generators
from scoring.generation.generators import Generator
from scoring.models import ModelVersion
from scoring.store import registry

_generators: dict[str, Generator] = {}
_lock = threading.Lock()


def generator_for(version: ModelVersion, folder: str | None = None) -> Generator:
    """The generator a search with `version` uses (module docstring), cached per process."""
    folder = folder or str(backbone_folder(version.path, read_model_config(version.path)))
    with _lock:
        if folder not in _generators:
            _generators.clear()  # one generator per process: a second would double the memory
            trust = version.trust_remote_code and settings.STEPWISE_ALLOW_TRUST_REMOTE_CODE
            _generators[folder] = generators.LocalGenerator(folder, dtype=registry._dtype_setting(),
                                                            trust_remote_code=trust)
        return _generators[folder]


def run_search(*, body: dict, model_version: ModelVersion, generator: Generator | None = None) -> dict:
    """One search as the API describes it: {"problem", "method", "budget", "options"} -> result dict.

    Raises ValueError (a 400) for a method, option or budget the search refuses.
    """
    budget = search.Budget(**body.get("budget", {}))
    if budget.max_tokens is None or budget.max_tokens > settings.STEPWISE_SEARCH_MAX_TOKENS:
        raise ValueError(f"budget.max_tokens must be set, at most {settings.STEPWISE_SEARCH_MAX_TOKENS}")
    arguments = search.method_arguments(body["method"], body.get("options", {}))
    generator = generator or generator_for(model_version)
    prm = registry.load(model_version)
    result = search.run(method=body["method"], problem=body["problem"], generator=generator,
                        scorer=search.prm_scorer(prm), budget=budget, **arguments)
    return {"model": model_version.name, "generator": generator.name, **result.as_dict()}
