"""Test defaults that must be in place before Django reads its settings.

Loaded as a plugin (`-p tests.env_defaults` in pytest.ini), which runs before
pytest-django imports the settings; a conftest would run too late.
"""
import os
import tempfile

os.environ.setdefault("SECRET_KEY", "stepwise-tests")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Users are made by the thousand: a fast hasher (Django's default takes 0.24 s a password here),
# for every process the tests start too.
os.environ.setdefault("STEPWISE_PASSWORD_HASHERS", "django.contrib.auth.hashers.MD5PasswordHasher")
# Each test session gets its own data dir (models, exports, SQLite file, broker folders).
os.environ.setdefault("STEPWISE_DATA_DIR", tempfile.mkdtemp(prefix="stepwise-test-"))

# Under pytest-xdist (`./stepwise test --fast` runs a worker per core) each worker is a session of
# its own: pytest-django gives it its own test database; here it gets its own Redis database
# (tests flush theirs, and counters such as the login lockout's are keyed by address) and data
# dir, and one torch thread, so two workers on two cores do not fight over them.
_worker = os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1", ...; set before this module is imported
if _worker:
    _index = int(_worker.removeprefix("gw"))
    for _name in ("REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
        _url = os.environ.get(_name, "")
        if _url.startswith("redis://"):
            _base, _, _db = _url.rstrip("/").rpartition("/")
            os.environ[_name] = f"{_base}/{(int(_db) if _db.isdigit() else 0) + _index + 1}"
    os.environ["STEPWISE_DATA_DIR"] = os.path.join(os.environ["STEPWISE_DATA_DIR"], _worker)
    os.makedirs(os.environ["STEPWISE_DATA_DIR"], exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
