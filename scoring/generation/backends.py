"""A generator built from the spec a run stores: the local model, or an OpenAI-compatible server."""
from pathlib import Path

from scoring.generation.generators import Generator, LocalGenerator, check_spec, default_generator_folder


def generator_from_spec(spec: dict) -> Generator:
    """A generator built from a stored spec (see `check_spec`)."""
    spec = check_spec(spec)
    options = {key: value for key, value in spec.items() if key not in ("backend", "model", "base_url")}
    if spec["backend"] == "openai":
        from scoring.generation.openai_generator import OpenAIGenerator  # openai's client: only where it generates

        return OpenAIGenerator(spec["base_url"], spec["model"], **options)
    return LocalGenerator(local_folder(spec.get("model")), **options)


def local_folder(model: str | None) -> str | Path:
    """The folder of a local spec's model: the default backbone when none is named, or when the
    spec names it (as one resolved in a web process does) before it was converted: it is built now."""
    if model and (Path(model) / "config.json").exists():
        return model  # the usual case, and the only one outside Django (the default folder is a setting's)
    if not model or model == str(default_generator_folder(build=False)):
        return default_generator_folder()
    return model
