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
# Each test session gets its own data dir (models, exports, SQLite file, broker folders).
os.environ.setdefault("STEPWISE_DATA_DIR", tempfile.mkdtemp(prefix="stepwise-test-"))
