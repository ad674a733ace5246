"""The processes `./stepwise run` has given up restarting, for the admin's home page.

The script's supervision (`watch` in ./stepwise) starts a worker, the scorer or beat again when it
stops by itself, and leaves it stopped after several quick crashes in a row, writing one line
about it to ``logs/NAME.failed`` in the data dir; its next `run` removes those files. Under
docker-compose the restart policy restarts processes instead, and nothing is written here.
"""
from django.conf import settings

MAX_REPORT_CHARACTERS = 1000  # a line the script wrote; anything longer is not its


def given_up() -> list[str]:
    """What the script said about each process it left stopped, one line each."""
    return [path.read_text(errors="replace")[:MAX_REPORT_CHARACTERS].strip()
            for path in sorted((settings.DATA_DIR / "logs").glob("*.failed"))]
