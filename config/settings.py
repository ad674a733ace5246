"""Stepwise settings, read from the environment.

Every helper here fails loudly on a bad value: a typo in DATABASE_URL must stop the
process at start-up, not surface as a confusing error an hour later in a worker.
Defaults need no server at all: a SQLite file and a file-system Celery broker in the
data dir. PostgreSQL and Redis are used when their URLs are given.
"""
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_choice, env_float, env_int, env_shares, env_str

BASE_DIR = Path(__file__).resolve().parent.parent


DEBUG = env_bool("DEBUG", False)

SECRET_KEY = env_str("SECRET_KEY")
if SECRET_KEY is None:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = "insecure-development-key-only-used-with-DEBUG"

ALLOWED_HOSTS = [h.strip() for h in env_str("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",")]
CSRF_TRUSTED_ORIGINS = [o for o in (env_str("CSRF_TRUSTED_ORIGINS", "") or "").split(",") if o]

# Models, exports, uploads and (by default) the SQLite file and broker folders live here.
DATA_DIR = Path(env_str("STEPWISE_DATA_DIR", str(BASE_DIR / "var"))).resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)
MODELS_DIR = DATA_DIR / "models"
EXPORTS_DIR = DATA_DIR / "exports"
UPLOADS_DIR = DATA_DIR / "uploads"
for folder in (MODELS_DIR, EXPORTS_DIR, UPLOADS_DIR):
    folder.mkdir(parents=True, exist_ok=True)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "annotate",
    "scoring",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "config.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "config.wsgi.application"


def database_from_url(url: str) -> dict:
    try:
        # Persistent connections: a new PostgreSQL connection per request (a backend forked, auth)
        # cost more CPU than most of our requests. Health checks drop a connection the server closed.
        config = dj_database_url.parse(url, conn_max_age=env_int("DB_CONN_MAX_AGE", 60), conn_health_checks=True)
    except (ValueError, KeyError) as error:
        raise ImproperlyConfigured(f"DATABASE_URL={url!r} is not a database URL: {error}") from None
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # Web, worker and beat write at once: without WAL, a busy timeout and IMMEDIATE
        # transactions SQLite answers "database is locked" under a handful of writers.
        config["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    return config


DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{DATA_DIR / 'stepwise.sqlite3'}")
DATABASES = {"default": database_from_url(DATABASE_URL)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test-stepwise.sqlite3")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "annotate:home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
MEDIA_ROOT = UPLOADS_DIR
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024

# --- Celery -------------------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL")
BROKER_DIR = DATA_DIR / "broker"
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL or "filesystem://")
if CELERY_BROKER_URL == "filesystem://":
    # Producer and worker share one folder: each reads what the other wrote. The control
    # folder (exchange tables) sits beside it; kombu's default is ./control in the cwd.
    for sub in ("queue", "processed", "control"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
    }
    (DATA_DIR / "results").mkdir(exist_ok=True)
    CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", f"file://{DATA_DIR / 'results'}")
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600)}
    CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", REDIS_URL or CELERY_BROKER_URL)
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TIMEZONE = TIME_ZONE
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 3600)
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 3300)
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "default"
# Model work (rescoring, training) runs on its own queue, served by GPU workers where present.
CELERY_TASK_ROUTES = {"scoring.tasks.*": {"queue": "ml"}}
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)

# --- REST framework ------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Stepwise API",
    "DESCRIPTION": "Process supervision: pool, labels, scores, models and exports.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and Swagger UI need a login (session) or a token, like the rest of the site.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    # Swagger UI's files ship with the app (drf-spectacular-sidecar): no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # One name for a choice set used by several fields (else drf-spectacular warns).
    "ENUM_NAME_OVERRIDES": {"FinishReasonEnum": "annotate.models.labels.FinishReason"},
}

# --- Stepwise ------------------------------------------------------------------------
# Every STEPWISE_* value is parsed here, at start-up, and a bad one names its variable.
# Seconds a solution stays leased to an annotator without activity.
STEPWISE_LEASE_SECONDS = env_int("STEPWISE_LEASE_SECONDS", 600, minimum=1)
# Heartbeats one annotator may send per minute (the page sends two, plus one on leaving).
STEPWISE_HEARTBEATS_PER_MINUTE = env_int("STEPWISE_HEARTBEATS_PER_MINUTE", 20, minimum=1)
# Seconds allowed to grade one answer with math-verify before it counts as unknown.
STEPWISE_GRADING_TIMEOUT = env_float("STEPWISE_GRADING_TIMEOUT", 5.0, minimum=0.1)
STEPWISE_ALLOW_TRUST_REMOTE_CODE = env_bool("STEPWISE_ALLOW_TRUST_REMOTE_CODE", False)
# Scoring (scoring/): precision ("auto" = bf16 where supported), tokens per forward batch,
# solutions per Celery chunk, and the queue each rescore rebuilds.
STEPWISE_SCORING_DTYPE = env_choice("STEPWISE_SCORING_DTYPE", "auto", ("auto", "float32", "bfloat16", "float16"))
# 0: chosen by device (wide batches on a GPU, about four solutions on a CPU).
STEPWISE_SCORING_MAX_TOKENS = env_int("STEPWISE_SCORING_MAX_TOKENS", 0, minimum=0)
STEPWISE_RESCORE_CHUNK_SIZE = env_int("STEPWISE_RESCORE_CHUNK_SIZE", 64, minimum=1)
# Solutions with open work in one generation of the queue, restarts included.
STEPWISE_QUEUE_SIZE = env_int("STEPWISE_QUEUE_SIZE", 500, minimum=1)
STEPWISE_QUEUE_PER_PROBLEM = env_int("STEPWISE_QUEUE_PER_PROBLEM", 2, minimum=1)
# Shares of the rebuilt queue, "reason=share,...", parsed into {reason: share} summing to 1;
# a random share stays by default because pure convincing-wrong selection did worse than
# random with a weak PRM (issue 5).
STEPWISE_SELECTION_SHARES = env_shares(
    "STEPWISE_SELECTION_SHARES", "convincing_wrong=0.4,convincing=0.2,uncertain=0.1,random=0.3"
)
# Rescore jobs with no chunk done for this long get their missing chunks re-dispatched
# (a worker killed mid-job; Redis redelivers only after its visibility timeout).
STEPWISE_RESCORE_STALL_SECONDS = env_int("STEPWISE_RESCORE_STALL_SECONDS", 900, minimum=1)
# Seconds POST /api/score waits for the ml worker's answer before a 503 (the task's own
# time limit is a little longer, so a late answer is never computed for nobody for long).
STEPWISE_SCORE_API_TIMEOUT = env_float("STEPWISE_SCORE_API_TIMEOUT", 30.0, minimum=0.1)
# Loaded PRMs a worker keeps, by weight fingerprint (head-only versions share one backbone).
STEPWISE_MODEL_CACHE_SIZE = env_int("STEPWISE_MODEL_CACHE_SIZE", 2, minimum=1)
FEATURE_CACHE_DIR = MODELS_DIR / "feature-cache"  # frozen-backbone step features (training, evaluation)
CELERY_BEAT_SCHEDULE = {
    "resume-stalled-rescores": {
        "task": "scoring.tasks.resume_rescores_task",
        "schedule": 300.0,
        "kwargs": {"idle_seconds": STEPWISE_RESCORE_STALL_SECONDS},
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
