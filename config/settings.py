"""Stepwise settings, read from the environment.

Every helper here fails loudly on a bad value: a typo in DATABASE_URL must stop the
process at start-up, not surface as a confusing error an hour later in a worker.
Defaults need no server at all: a SQLite file and a file-system Celery broker in the
data dir. PostgreSQL and Redis are used when their URLs are given.
"""
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF, UNSAFE_INLINE
from dj_database_url import DBConfig
from django.conf import global_settings
from django.core.exceptions import ImproperlyConfigured

from infra.env import env_bool, env_choice, env_int, env_list, env_networks, env_str

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
    "axes",
    "annotate",
    "scoring",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Before anything reads a body (sessions, CSRF, DRF): an oversize one is refused unread.
    "infra.limits.BodySizeLimitMiddleware",
    # django-csp's, with the policy built once per process (infra/content_security.py).
    "infra.content_security.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # /p/<slug>/...: the project's pages (request.project, and reverse() within the project).
    "annotate.web.project_urls.ProjectMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into its 429 answer.
    "axes.middleware.AxesMiddleware",
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
    {
        # The labeling pages only (annotate/web/jinja.py says why).
        "NAME": "jinja2",
        "BACKEND": "django.template.backends.jinja2.Jinja2",
        "DIRS": [BASE_DIR / "templates" / "jinja2"],
        "APP_DIRS": False,
        "OPTIONS": {"environment": "annotate.web.jinja.environment",
                    "context_processors": ["annotate.web.jinja.one_csrf_token"]},
    },
]

WSGI_APPLICATION = "config.wsgi.application"


def database_from_url(url: str) -> DBConfig:
    try:
        # Persistent connections: a new PostgreSQL connection per request (a backend forked, auth)
        # cost more CPU than most of our requests. Health checks replace a connection the server
        # dropped (a restart) at the next request instead of failing it.
        config = dj_database_url.parse(url, conn_max_age=env_int("DB_CONN_MAX_AGE", 60), conn_health_checks=True)
    except (ValueError, KeyError) as error:
        raise ImproperlyConfigured(f"DATABASE_URL={url!r} is not a database URL: {error}") from None
    if config["ENGINE"] == "django.db.backends.postgresql":
        # Parameters bound by the server, and a statement run 5 times on a connection prepared
        # (Django leaves psycopg's preparing off unless asked), so PostgreSQL stops parsing and
        # planning the labeling path's statements: 13.3 -> 8.8 ms of its CPU per labeled task.
        # A pooler in transaction mode (PgBouncer) cannot keep them: `auto` prepares nothing on a
        # connection that goes through one (infra/postgresql finds out at connect); `true` prepares
        # there too (PgBouncer 1.21+ with max_prepared_statements), `false` nowhere.
        prepared = env_choice("DB_PREPARED_STATEMENTS", "auto", ("auto", "true", "false"))
        config["OPTIONS"] = {"server_side_binding": True, "prepare_threshold": None if prepared == "false" else 5,
                             "prepare_behind_pooler": prepared == "true"}
        # Django's backend, but a connection's health is checked without a query (infra/postgresql).
        config["ENGINE"] = "infra.postgresql"
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

# Django's hashers unless set (the first hashes new passwords). The tests name a fast one for the
# thousands of users they make (tests/env_defaults.py); a deployment has no reason to.
PASSWORD_HASHERS = env_list("STEPWISE_PASSWORD_HASHERS") or global_settings.PASSWORD_HASHERS
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "annotate:home"
LOGOUT_REDIRECT_URL = "login"

# --- Security ------------------------------------------------------------------------
# Login lockout (django-axes, infra/login_lockout.py): after STEPWISE_LOGIN_FAILURE_LIMIT wrong
# passwords for one username from one address, that pair is refused (429) on /accounts/login/ and
# /admin/login/ for STEPWISE_LOGIN_LOCKOUT_SECONDS, even with the right password; so is an address
# past STEPWISE_LOGIN_ADDRESS_FAILURE_LIMIT failures over all usernames (spraying). A browser that
# logged in as that user before is counted apart, by its device cookie: an attacker behind the
# same NAT cannot lock it out. Past a few failures a pair also waits a delay that doubles with
# each failure (429 with Retry-After).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    # ModelBackend with the per-request user read memoized while it is unchanged (infra/auth.py).
    "infra.auth.MemoizedModelBackend",
]
AXES_FAILURE_LIMIT = env_int("STEPWISE_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(seconds=env_int("STEPWISE_LOGIN_LOCKOUT_SECONDS", 900, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_HANDLER = "infra.login_lockout.LoginLockoutHandler"
AXES_LOCKOUT_CALLABLE = "infra.login_lockout.lockout_response"  # the 429, with Retry-After
STEPWISE_LOGIN_ADDRESS_FAILURE_LIMIT = env_int("STEPWISE_LOGIN_ADDRESS_FAILURE_LIMIT", 30, minimum=1)
# Checked wrong passwords per username per hour over all addresses; then refused to all but known devices.
STEPWISE_LOGIN_ACCOUNT_FAILURES_PER_HOUR = env_int("STEPWISE_LOGIN_ACCOUNT_FAILURES_PER_HOUR", 20, minimum=1)
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False
# Behind a TLS-terminating proxy, the proxy's X-Forwarded-Proto says the request was https
# (only set this when the proxy overwrites that header; a client could forge it otherwise).
if env_bool("STEPWISE_BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# The proxies whose X-Forwarded-For is believed; the client address for lockout, throttles and the
# wrong-token limit is decided in one place (infra/client_address.py). None: the socket address.
STEPWISE_TRUSTED_PROXIES = env_networks("STEPWISE_TRUSTED_PROXIES")
AXES_CLIENT_IP_CALLABLE = "infra.client_address.client_address"
# Off by default so `./stepwise run` works on http://localhost; docker-compose turns them on.
SECURE_SSL_REDIRECT = env_bool("STEPWISE_SSL_REDIRECT", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("STEPWISE_SECURE_COOKIES", False)
SECURE_HSTS_SECONDS = env_int("STEPWISE_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("STEPWISE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("STEPWISE_HSTS_PRELOAD", False)
# A session ends this long after login, active or not (a shared lab machine left logged in).
SESSION_COOKIE_AGE = env_int("STEPWISE_SESSION_SECONDS", 12 * 3600, minimum=60)
# Enforced on every response. Scripts only from our own files: no inline scripts, no
# handlers, no eval (htmx's eval is off in base.html's htmx-config). Styles allow inline:
# KaTeX positions every glyph with a style attribute and the admin's change list has a
# <style> block; a style cannot run code.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF, UNSAFE_INLINE],
        "img-src": [SELF, "data:"],
        "font-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
# One language: without the translation machinery every request and template does less work.
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
MEDIA_ROOT = UPLOADS_DIR
# Bounded input (infra/limits.py): any request body but an upload, and an upload.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("STEPWISE_MAX_BODY_BYTES", 10 * 1024 * 1024, minimum=1024)
STEPWISE_MAX_UPLOAD_BYTES = env_int("STEPWISE_MAX_UPLOAD_BYTES", 256 * 1024 * 1024, minimum=1024)
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024
# The web server (infra/web_server.py, waitress) reads each request whole before Django runs it.
# A connection that sends and reads nothing for this long is closed (an idle keep-alive, a stalled
# header or body, a client that stopped reading its answer); headers past this size get 431;
# connections past this many per process wait in the listen queue.
STEPWISE_CLIENT_TIMEOUT_SECONDS = env_int("STEPWISE_CLIENT_TIMEOUT_SECONDS", 30, minimum=1)
STEPWISE_MAX_HEADER_BYTES = env_int("STEPWISE_MAX_HEADER_BYTES", 64 * 1024, minimum=8 * 1024)
STEPWISE_MAX_CONNECTIONS = env_int("STEPWISE_MAX_CONNECTIONS", 1000, minimum=10)

# --- Celery -------------------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL")
BROKER_DIR = DATA_DIR / "broker"
# The file-system broker names a host it never uses: without one, kombu logs a warning on each connect.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL or "filesystem://localhost//")
if CELERY_BROKER_URL.startswith("filesystem://"):
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
# Celery's Django fixup closes every database connection before and after each task unless told to
# reuse them for so many tasks: a new PostgreSQL backend per task, whose start and cold caches cost
# about 20 ms of the machine's CPU a rescore chunk (docs/benchmarks.md). Never by count here:
# config/celery.py applies Django's rule between requests (DB_CONN_MAX_AGE, health checks) instead.
CELERY_DB_REUSE_MAX = 2**62
CELERY_TASK_DEFAULT_QUEUE = "default"
# Model work (rescoring, training) runs on its own queue, served by GPU workers where present.
# The answers a web request waits for (/api/score, /api/search) have a queue and a worker of their
# own, so they never wait behind rescoring or training on `ml` (scoring/on_worker.py).
CELERY_TASK_ROUTES = {
    "scoring.tasks.score_texts_task": {"queue": "score"},
    "scoring.tasks.search_task": {"queue": "score"},
    "scoring.tasks.*": {"queue": "ml"},
}
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)



def shared_cache(name: str, *, ignore_outage: bool) -> dict:
    """A cache every process shares: Redis when there is one (django-redis, which keeps one client
    per server, where Django's own backend builds one per operation), else files in the data dir.
    Redis is optional at run time: an operation gives up within a second on a Redis that is down
    or unreachable, and with `ignore_outage` reads as a miss and writes as nothing (django-redis'
    IGNORE_EXCEPTIONS); without it, raises, for the caller to fail open or closed (infra/counter.py)."""
    if not REDIS_URL:
        return {"BACKEND": "django.core.cache.backends.filebased.FileBasedCache", "LOCATION": str(DATA_DIR / name)}
    return {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": REDIS_URL, "KEY_PREFIX": name,
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1, "IGNORE_EXCEPTIONS": ignore_outage}}


CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    # Per-user request rates and known devices' wrong passwords (infra/counter.py), across web processes.
    "throttle": shared_cache("throttle", ignore_outage=False),
    # The stamp every process's memos are checked against at each request (infra/memo.py).
    "memo": shared_cache("memo", ignore_outage=False),
}
# The models whose rows process memos keep (the user, their groups, the labeling settings): a save
# or delete of one renews that stamp, so every process reads them again at its next request.
STEPWISE_MEMOIZED_MODELS = ["auth.User", "auth.Group", "auth.User_groups", "annotate.LabelingConfig",
                            "annotate.Project", "annotate.Membership"]
# Sessions are read on every request. With Redis they are read from it (`cached_db`: written
# through to the database too, so a Redis restart or outage logs nobody out: a miss reads the
# database); without it, from the database, since a per-process cache would not see a logout in
# another web process.
if REDIS_URL:
    CACHES["sessions"] = shared_cache("sessions", ignore_outage=True)
    SESSION_ENGINE = "infra.sessions"
    SESSION_CACHE_ALIAS = "sessions"

# --- REST framework ------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # DRF's TokenAuthentication, answering 429 past STEPWISE_BAD_TOKEN_LIMIT wrong tokens per address.
        "infra.auth.LimitedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PARSER_CLASSES": [
        "infra.limits.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
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
    "ENUM_NAME_OVERRIDES": {
        "FinishReasonEnum": "annotate.models.labels.FinishReason",
        "RatingEnum": "steps.ratings.CHOICES",
    },
}

# --- Stepwise ------------------------------------------------------------------------
# Labeling, scoring, the API and jobs: config/stepwise_settings.py, parsed at start-up as these are.
from config.stepwise_settings import *  # noqa: E402, F403

FEATURE_CACHE_DIR = MODELS_DIR / "feature-cache"  # frozen-backbone step features (training, evaluation)
ENSEMBLES_DIR = MODELS_DIR / "ensembles"  # per model version: its bootstrap ensemble and the pool's uncertainties
CELERY_BEAT_SCHEDULE = {
    "reconcile-jobs": {"task": "annotate.reconcile_jobs_task", "schedule": 30.0},
    "remove-expired-uploads": {"task": "annotate.remove_expired_uploads_task", "schedule": 86400.0},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # django-axes logs every login at INFO; its lockouts and failures are WARNING. httpx (the
    # outbound client) logs every request at INFO: a rescore's batches would drown the worker's log.
    "loggers": {"django.db.backends": {"level": "WARNING"}, "axes": {"level": "WARNING"},
                "httpx2": {"level": "WARNING"}},
}
