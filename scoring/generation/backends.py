"""A generator built from the spec a run stores: the local model, or an OpenAI-compatible server."""
from scoring.generation.generators import Generator, LocalGenerator, check_spec, default_generator_folder


def generator_from_spec(spec: dict) -> Generator:
    """A generator built from a stored spec (see `check_spec`)."""
    spec = check_spec(spec)
    options = {key: value for key, value in spec.items() if key not in ("backend", "model", "base_url")}
    if spec["backend"] == "openai":
        from scoring.generation.openai_generator import OpenAIGenerator  # openai's client: only where it generates

        return OpenAIGenerator(spec["base_url"], spec["model"], **options)
    return LocalGenerator(spec.get("model") or default_generator_folder(), **options)
