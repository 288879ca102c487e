"""Arcana Console settings, read from the environment (see `arcana_site/env.py`).

The defaults are the embedded set-up: a SQLite file and a file-system Celery broker under
`ARCANA_DATA_DIR` (default `./var`), so a fresh checkout runs with no servers. Production sets
`DATABASE_URL=postgres://…`, `CELERY_BROKER_URL=redis://…`, `SECRET_KEY`, `DEBUG=False`.
"""

from __future__ import annotations

import hashlib
import secrets
import sys
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from arcana_site.env import envbool, envbroker, envcache, envchoice, envdatabase, envint, envlist, envstr

BASE_DIR = Path(__file__).resolve().parent.parent
# Pages and static files: the checkout's templates/ and static/, or where a wheel install put them
# (`pip install "arcana-console[server]"` copies them to <prefix>/share/arcana-console/).
ASSETS_DIR = BASE_DIR if (BASE_DIR / "templates").is_dir() else Path(sys.prefix) / "share" / "arcana-console"
DATA_DIR = Path(envstr("ARCANA_DATA_DIR", str(BASE_DIR / "var"))).resolve()

DEBUG = envbool("DEBUG", default=False)

SECRET_KEY = envstr("SECRET_KEY")
_SECRET_KEY_FILE = DATA_DIR / "secret_key"
if not SECRET_KEY and _SECRET_KEY_FILE.is_file():
    # The embedded installation's key, written by scripts/run on its first start: every manage.py
    # command run from the same checkout (changepassword, create_api_key, …) signs with the same key.
    SECRET_KEY = _SECRET_KEY_FILE.read_text().strip() or None
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            f"SECRET_KEY is not set, DEBUG is off and there is no key file at {_SECRET_KEY_FILE}. On the "
            "embedded installation, set ARCANA_DATA_DIR to the folder scripts/run used (it writes the "
            "key there on its first start). Otherwise set SECRET_KEY to a long random string "
            "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(50))'`), "
            "or set DEBUG=True for local development."
        )
    # Development only: a fresh key per process is fine, sessions just do not survive restarts.
    SECRET_KEY = "dev-" + secrets.token_urlsafe(40)

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "django_filters",
    "traces",
]

MIDDLEWARE = [
    # The cyclic garbage collector paused while a request is handled (arcana_site/collector.py).
    "arcana_site.collector.CollectorPausedMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Content-Security-Policy on every response: only our own static files (arcana_site/security.py).
    "arcana_site.security.ContentSecurityPolicyMiddleware",
    # 400 for a NUL in the path or query string (nothing stored holds one; PostgreSQL refuses it).
    "arcana_site.security.RejectNulMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# Login throttling (arcana_site/login.py): repeated failures lock the username and the address.
AUTHENTICATION_BACKENDS = ["arcana_site.login.ThrottledModelBackend"]
ARCANA_LOGIN_WINDOW_SECONDS = envint("ARCANA_LOGIN_WINDOW_SECONDS", default=900, minimum=1)
ARCANA_LOGIN_MAX_FAILURES_PER_USER = envint("ARCANA_LOGIN_MAX_FAILURES_PER_USER", default=5, minimum=1)
ARCANA_LOGIN_MAX_FAILURES_PER_ADDRESS = envint("ARCANA_LOGIN_MAX_FAILURES_PER_ADDRESS", default=20, minimum=1)

ROOT_URLCONF = "arcana_site.urls"
WSGI_APPLICATION = "arcana_site.wsgi.application"
ASGI_APPLICATION = "arcana_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [ASSETS_DIR / "templates"],
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

DATABASE_URL = envdatabase("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'arcana.sqlite3'}")
DATABASES = {"default": DATABASE_URL.to_django()}
if DATABASE_URL.engine == "sqlite":
    Path(DATABASE_URL.name).parent.mkdir(parents=True, exist_ok=True)
# PostgreSQL: the ingestion prepares its own statements (traces/core/prepared.py); False for a
# pooler that cannot hold prepared statements (PgBouncer in transaction mode before 1.21).
ARCANA_DB_PREPARED_STATEMENTS = envbool("ARCANA_DB_PREPARED_STATEMENTS", default=True)
if DATABASE_URL.engine == "postgres" and ARCANA_DB_PREPARED_STATEMENTS:
    # Django's own cursors bind on the client and never prepare, whatever this says; the ingestion's
    # cursor asks for each of its statements to be prepared, which psycopg refuses while it is None.
    DATABASES["default"]["OPTIONS"] = {
        **DATABASES["default"].get("OPTIONS", {}),
        "prepare_threshold": 2**31 - 1,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [ASSETS_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise expects it even before collectstatic
# Serve straight from static/ too, so pages are styled before (or without) collectstatic.
WHITENOISE_USE_FINDERS = True
MEDIA_ROOT = DATA_DIR / "media"
# Uploaded files: a local folder on one machine, the database when web nodes and workers run on
# several (traces/core/storage.py). Static files get hashed names (collectstatic writes the manifest).
ARCANA_STORAGE = envchoice("ARCANA_STORAGE", default="local", choices=["local", "database"])
STORAGES = {
    "default": {
        "BACKEND": {
            "local": "django.core.files.storage.FileSystemStorage",
            "database": "traces.core.storage.DatabaseStorage",
        }[ARCANA_STORAGE]
    },
    "staticfiles": {"BACKEND": "arcana_site.staticfiles.StaticStorage"},
}

# A finished run's drawn parts (fidelity map, turn page, compare) are cached by the run's state:
# in this process's memory by default, in Redis (`ARCANA_CACHE_URL`) to share them between web nodes.
CACHES = {"default": envcache("ARCANA_CACHE_URL")}
if "LOCATION" in CACHES["default"]:
    # A shared cache outlives a deployment: its keys carry a digest of the code and templates that
    # drew the parts, so a new version never serves an older one's HTML.
    _drawn_by = sorted((ASSETS_DIR / "templates").rglob("*.html"))
    _drawn_by += sorted(p for package in ("traces", "runtime") for p in (BASE_DIR / package).rglob("*.py"))
    _digest = hashlib.sha256(b"".join(p.read_bytes() for p in _drawn_by))
    CACHES["default"]["KEY_PREFIX"] = _digest.hexdigest()[:12]

# Bodies above this size are refused with 413 (API batches and uploads alike).
ARCANA_MAX_UPLOAD_BYTES = envint("ARCANA_MAX_UPLOAD_BYTES", default=100_000_000, minimum=1024)
ARCANA_MAX_INGEST_BYTES = envint("ARCANA_MAX_INGEST_BYTES", default=20_000_000, minimum=1024)
# Django refuses larger in-memory bodies before our views see them; our views enforce the limits above.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(ARCANA_MAX_UPLOAD_BYTES, ARCANA_MAX_INGEST_BYTES)
FILE_UPLOAD_MAX_MEMORY_SIZE = 5_000_000
# Number of worker processes that write to the database (web + Celery); checked against SQLite.
ARCANA_WORKER_PROCESSES = envint("ARCANA_WORKER_PROCESSES", default=1, minimum=1)
ARCANA_TRACE_DIR = Path(envstr("ARCANA_TRACE_DIR", str(DATA_DIR / "traces")))
# A running run with no new event for this long is shown idle, not Live, and pages stop polling it.
ARCANA_LIVE_WINDOW_SECONDS = envint("ARCANA_LIVE_WINDOW_SECONDS", default=120, minimum=1)
# Ingest requests (POST /api/v1/ingest and uploads) allowed per API key per window; 0 turns the limit
# off. Counted in the database (traces/ingest/ratelimit.py), so it holds across gunicorn workers and machines.
ARCANA_INGEST_RATE_LIMIT = envint("ARCANA_INGEST_RATE_LIMIT", default=1200, minimum=0)
ARCANA_INGEST_RATE_WINDOW_SECONDS = envint("ARCANA_INGEST_RATE_WINDOW_SECONDS", default=60, minimum=1)
# How long an invite link stays usable.
ARCANA_INVITE_DAYS = envint("ARCANA_INVITE_DAYS", default=7, minimum=1)

# Conversations run by our workers (issue 12). Providers are configured here, never typed into a page:
# ARCANA_PROVIDERS is JSON, name -> {"base_url", "model" or "models", "api_key_env"}; keys stay in the
# environment variables it names. The offline `scripted` provider is always there.
ARCANA_PROVIDERS = envstr("ARCANA_PROVIDERS", "") or ""
# Operator limits: a conversation that reaches one stops with that reason.
ARCANA_MAX_TURNS_PER_CONVERSATION = envint("ARCANA_MAX_TURNS_PER_CONVERSATION", default=50, minimum=1)
ARCANA_MAX_STEPS_PER_TURN = envint("ARCANA_MAX_STEPS_PER_TURN", default=10, minimum=1)
ARCANA_MAX_TOKENS_PER_CONVERSATION = envint(
    "ARCANA_MAX_TOKENS_PER_CONVERSATION", default=2_000_000, minimum=1
)
ARCANA_MAX_CONCURRENT_CONVERSATIONS = envint("ARCANA_MAX_CONCURRENT_CONVERSATIONS", default=4, minimum=1)
# Bytes (UTF-8) a conversation's messages may hold in all: the script of `POST /api/v1/conversations`
# and a playground's messages so far; a request body above it is refused (413) before it is read.
ARCANA_MAX_CONVERSATION_BYTES = envint("ARCANA_MAX_CONVERSATION_BYTES", default=1_000_000, minimum=1024)
# Milliseconds each answer of the offline `scripted` provider takes (0: at once). scripts/run sets 700,
# so a new user watches the demo's pin, compression and recall arrive step by step.
ARCANA_SCRIPTED_STEP_MS = envint("ARCANA_SCRIPTED_STEP_MS", default=0, minimum=0)
# A worker running a turn renews its lease every third of this; the sweeper re-queues a conversation
# whose lease expired (its worker vanished), at most ARCANA_CONVERSATION_MAX_ATTEMPTS times per unit of work.
ARCANA_CONVERSATION_LEASE_SECONDS = envint("ARCANA_CONVERSATION_LEASE_SECONDS", default=60, minimum=2)
ARCANA_CONVERSATION_MAX_ATTEMPTS = envint("ARCANA_CONVERSATION_MAX_ATTEMPTS", default=3, minimum=1)
ARCANA_CONVERSATION_SWEEP_SECONDS = envint("ARCANA_CONVERSATION_SWEEP_SECONDS", default=30, minimum=1)
# The queue conversation tasks go to (workers: `-Q ingest,agents`); another name isolates a fleet.
ARCANA_AGENTS_QUEUE = envstr("ARCANA_AGENTS_QUEUE", "agents") or "agents"
# The queue upload tasks go to (workers: `-Q ingest,agents`); another name isolates a fleet.
ARCANA_INGEST_QUEUE = envstr("ARCANA_INGEST_QUEUE", "ingest") or "ingest"

# Celery. The embedded default is kombu's filesystem transport: no server, but a real worker process.
# ARCANA_BROKER_DIR: workers with data folders of their own (as on separate machines) still share
# the embedded broker's folder.
_BROKER_DIR = Path(envstr("ARCANA_BROKER_DIR", str(DATA_DIR / "broker")))
CELERY_BROKER_URL = envbroker("CELERY_BROKER_URL", default="filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_BROKER_DIR / "out"),
        "data_folder_out": str(_BROKER_DIR / "out"),
        "processed_folder": str(_BROKER_DIR / "processed"),
        "control_folder": str(_BROKER_DIR / "control"),
        "store_processed": False,
    }
    CELERY_RESULT_BACKEND = envstr("CELERY_RESULT_BACKEND", f"file://{_BROKER_DIR / 'results'}")
    # The file-system transport does not create its folders; the web server and the worker both may.
    for _folder in ("out", "processed", "results", "control"):
        (_BROKER_DIR / _folder).mkdir(parents=True, exist_ok=True)
else:
    CELERY_RESULT_BACKEND = envstr("CELERY_RESULT_BACKEND", CELERY_BROKER_URL)
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
# A task whose worker process dies (SIGKILL, OOM) goes back to the queue instead of being acknowledged.
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "ingest"
CELERY_TASK_ROUTES = {
    "traces.tasks.process_upload": {"queue": ARCANA_INGEST_QUEUE},
    "traces.tasks.sweep_uploads": {"queue": ARCANA_INGEST_QUEUE},
    "traces.tasks.run_conversation": {"queue": "agents"},
    "traces.tasks.run_demo_conversation": {"queue": "agents"},
    "traces.tasks.sweep_conversations": {"queue": "agents"},
    "traces.tasks.run_judge": {"queue": "agents"},  # judges (issue 36)
    "traces.tasks.sweep_judge_runs": {"queue": "agents"},
    "traces.tasks.judge_new_runs": {"queue": "agents"},
    "traces.tasks.check_lost_instructions": {"queue": "agents"},  # lost instructions checked (issue 35)
    "traces.tasks.sweep_instruction_checks": {"queue": "agents"},
    "traces.tasks.run_experiment": {"queue": "agents"},  # experiments (issue 38)
    "traces.tasks.sweep_experiments": {"queue": "agents"},
    "traces.tasks.enforce_retention": {"queue": ARCANA_INGEST_QUEUE},
    "traces.tasks.derive_spans": {"queue": ARCANA_INGEST_QUEUE},  # OTLP spans left to a worker
    "traces.tasks.sweep_spans": {"queue": ARCANA_INGEST_QUEUE},
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Publishing fails fast when the broker is down (an upload is accepted and stays `queued`; the upload
# sweeper sends it once the broker is back): a short connect timeout and one quick retry, instead of
# kombu's defaults that keep a web request waiting.
CELERY_BROKER_CONNECTION_TIMEOUT = 3.0
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}
CELERY_REDIS_SOCKET_CONNECT_TIMEOUT = 3.0
# A Redis result backend retries 20 times a second apart by default (the "500 after 20 s" of a send
# with the broker down); tasks whose result is read elsewhere set ignore_result and skip it entirely.
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {
    "retry_policy": {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
}
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 3.0}
# Every task is bounded (a task may set tighter limits): soft raises SoftTimeLimitExceeded in the task,
# hard kills its process (acks_late + reject_on_worker_lost put it back; leases make that safe).
CELERY_TASK_SOFT_TIME_LIMIT = envint("ARCANA_TASK_SOFT_TIME_LIMIT", default=3600, minimum=10)
CELERY_TASK_TIME_LIMIT = CELERY_TASK_SOFT_TIME_LIMIT + 60

# Uploads survive a dead worker (traces/ingest/uploads.py): a `running` upload holds a lease its worker renews
# with every chunk; the sweeper re-queues it from its cursor once the lease ran out, re-sends `queued`
# uploads whose message was lost (broker down), and fails an upload after MAX_ATTEMPTS lost workers.
ARCANA_UPLOAD_LEASE_SECONDS = envint("ARCANA_UPLOAD_LEASE_SECONDS", default=60, minimum=1)
ARCANA_UPLOAD_SWEEP_SECONDS = envint("ARCANA_UPLOAD_SWEEP_SECONDS", default=30, minimum=1)
ARCANA_UPLOAD_RESEND_SECONDS = envint("ARCANA_UPLOAD_RESEND_SECONDS", default=120, minimum=1)
ARCANA_UPLOAD_MAX_ATTEMPTS = envint("ARCANA_UPLOAD_MAX_ATTEMPTS", default=5, minimum=1)

# Periodic work, run by Celery beat (`scripts/run` starts it with the worker; production runs one
# `celery beat`). A plain dict: each feature adds its own entry below.
CELERY_BEAT_SCHEDULE = {
    "sweep-uploads": {
        "task": "traces.tasks.sweep_uploads",
        "schedule": float(ARCANA_UPLOAD_SWEEP_SECONDS),
        "options": {"queue": ARCANA_INGEST_QUEUE},
    },
}

ARCANA_API_MAX_LIMIT = envint("ARCANA_API_MAX_LIMIT", default=500, minimum=1)
REST_FRAMEWORK = {
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # DRF's JSON parser replaced: size limit, depth, no NUL or lone surrogate, finite numbers
    # (the rules ingest applies; traces/core/jsonbody.py).
    "DEFAULT_PARSER_CLASSES": ["traces.core.jsonbody.JSONBodyParser"],
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # limit/offset, both bounded (ARCANA_API_MAX_LIMIT rows at most per request).
    "DEFAULT_PAGINATION_CLASS": "traces.core.pagination.CappedLimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # One error shape for every API error: {"error": ..., "detail": [...]}.
    "EXCEPTION_HANDLER": "traces.core.api.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Arcana Console API",
    "DESCRIPTION": "Ingest agent traces and read runs, turns, context decisions, pins and primitive events.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
}

SESSION_COOKIE_HTTPONLY = True
# Off by default so the embedded set-up works over plain http on 127.0.0.1; turn on behind TLS.
SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", default=False)
CSRF_COOKIE_SECURE = envbool("CSRF_COOKIE_SECURE", default=False)
# Behind TLS: SECURE_SSL_REDIRECT=True and a HSTS max-age (seconds); a proxy that terminates TLS must
# send X-Forwarded-Proto, which ARCANA_BEHIND_TLS_PROXY=True trusts.
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", default=False)
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", default=0, minimum=0)
# Only for a domain whose every subdomain is HTTPS too (the production example sets both).
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", default=False)
if envbool("ARCANA_BEHIND_TLS_PROXY", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
X_FRAME_OPTIONS = "DENY"
# A refused CSRF check is one of our error pages (arcana_site/errors.py), not Django's bare one.
CSRF_FAILURE_VIEW = "arcana_site.errors.csrf_failure"
SECURE_CONTENT_TYPE_NOSNIFF = True

# Logs on stderr with time, level and logger: plain lines, or one JSON object a line for collectors.
LOG_FORMAT = envchoice("LOG_FORMAT", default="plain", choices=["plain", "json"])
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "arcana_site.logs.JsonFormatter"},
    },
    "filters": {"quiet_forbidden": {"()": "arcana_site.errors.QuietForbidden"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    # An ordinary 403 is one warning line, without Django's traceback (arcana_site/errors.py).
    "loggers": {"django.request": {"filters": ["quiet_forbidden"]}},
    "root": {
        "handlers": ["console"],
        "level": envchoice(
            "LOG_LEVEL", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
        ),
    },
}


# The conversation sweeper (issue 12): conversations whose worker vanished are queued again.
CELERY_BEAT_SCHEDULE["sweep-conversations"] = {
    "task": "traces.tasks.sweep_conversations",
    "schedule": float(ARCANA_CONVERSATION_SWEEP_SECONDS),
    "options": {"queue": ARCANA_AGENTS_QUEUE},
}

# The judge sweeper (issue 36): judge runs whose worker vanished are queued again (the conversations'
# lease and attempts settings).
CELERY_BEAT_SCHEDULE["sweep-judge-runs"] = {
    "task": "traces.tasks.sweep_judge_runs",
    "schedule": float(ARCANA_CONVERSATION_SWEEP_SECONDS),
    "options": {"queue": ARCANA_AGENTS_QUEUE},
}

# The experiment sweeper (issue 38): items whose worker vanished are run again by a new task.
CELERY_BEAT_SCHEDULE["sweep-experiments"] = {
    "task": "traces.tasks.sweep_experiments",
    "schedule": float(ARCANA_CONVERSATION_SWEEP_SECONDS),
    "options": {"queue": ARCANA_AGENTS_QUEUE},
}

# Judges that watch new runs get their new finished runs (issue 36), as often as the sweeper runs.
CELERY_BEAT_SCHEDULE["judge-new-runs"] = {
    "task": "traces.tasks.judge_new_runs",
    "schedule": float(ARCANA_CONVERSATION_SWEEP_SECONDS),
    "options": {"queue": ARCANA_AGENTS_QUEUE},
}

# Checks of lost instructions whose task was lost are sent again (issue 35), as often as the sweeper runs.
CELERY_BEAT_SCHEDULE["sweep-instruction-checks"] = {
    "task": "traces.tasks.sweep_instruction_checks",
    "schedule": float(ARCANA_CONVERSATION_SWEEP_SECONDS),
    "options": {"queue": ARCANA_AGENTS_QUEUE},
}

# The dashboard's rollups (issue 37): the days ingestion marked are recomputed this often.
ARCANA_ROLLUP_SECONDS = envint("ARCANA_ROLLUP_SECONDS", default=30, minimum=5)
CELERY_BEAT_SCHEDULE["refresh-rollups"] = {
    "task": "traces.tasks.refresh_rollups",
    "schedule": float(ARCANA_ROLLUP_SECONDS),
    "options": {"queue": ARCANA_INGEST_QUEUE},
}

# OTLP spans (traces/ingest/spans.py): a request of at most this many new spans derives their runs
# before it answers; a larger one (or one that would wait for another derivation of its project) is
# stored and left to the `derive_spans` task. Spans pending longer than the sweep age get a task again.
ARCANA_OTLP_INLINE_SPANS = envint("ARCANA_OTLP_INLINE_SPANS", default=64, minimum=0)
ARCANA_OTLP_SWEEP_AFTER_SECONDS = envint("ARCANA_OTLP_SWEEP_AFTER_SECONDS", default=60, minimum=1)
CELERY_BEAT_SCHEDULE["sweep-spans"] = {
    "task": "traces.tasks.sweep_spans",
    "schedule": float(ARCANA_UPLOAD_SWEEP_SECONDS),
    "options": {"queue": ARCANA_INGEST_QUEUE},
}

# Retention (issue 13): runs older than their project's retention_days are deleted, audited.
ARCANA_RETENTION_SWEEP_SECONDS = envint("ARCANA_RETENTION_SWEEP_SECONDS", default=3600, minimum=10)
CELERY_BEAT_SCHEDULE["enforce-retention"] = {
    "task": "traces.tasks.enforce_retention",
    "schedule": float(ARCANA_RETENTION_SWEEP_SECONDS),
    "options": {"queue": ARCANA_INGEST_QUEUE},
}
