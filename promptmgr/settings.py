"""PromptManager settings: every knob is an environment variable with a local default.

Invalid values stop start-up with ImproperlyConfigured instead of failing at the first
request.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import json
import os
import sys
from pathlib import Path
from urllib.parse import urlparse

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def envstr(name: str, default: str) -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: str) -> bool:
    value = os.environ.get(name, default).strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {value!r}")


def envint(name: str, default: str, *, minimum: int, maximum: int) -> int:
    raw = os.environ.get(name, default)
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {raw!r}") from None
    if not minimum <= value <= maximum:
        raise ImproperlyConfigured(f"{name} must be between {minimum} and {maximum}, not {value}")
    return value


def envchoice(name: str, default: str, *, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, default).strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, not {value!r}")
    return value


def envcommand(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, list) or not value or not all(isinstance(part, str) and part for part in value):
        raise ImproperlyConfigured(f"{name} must be a JSON list of strings (program, arguments), not {raw!r}")
    return value


def envurl(name: str, default: str, *, schemes: set[str]) -> str:
    value = os.environ.get(name, default)
    parsed = urlparse(value)
    if parsed.scheme not in schemes or not (parsed.hostname or parsed.path):
        allowed = ", ".join(sorted(schemes))
        raise ImproperlyConfigured(f"{name} must be a URL with scheme {allowed}, not {value!r}")
    return value


def envschemes(name: str, default: str, *, known: set[str], refused: set[str]) -> tuple[str, ...]:
    """A comma-separated list of URL schemes, each one of ``known``; ``refused`` never."""
    raw = os.environ.get(name, default)
    values = tuple(dict.fromkeys(v.strip().lower() for v in raw.split(",") if v.strip()))
    bad = [v for v in values if v in refused or v not in known]
    if bad or not values:
        raise ImproperlyConfigured(
            f"{name} must list some of {', '.join(sorted(known))} (comma-separated), not {raw!r}"
        )
    return values


def envnetworks(name: str) -> tuple[str, ...]:
    """A comma-separated list of IP networks in CIDR form (``10.1.2.0/24,fd00::/8``); empty when unset."""
    raw = os.environ.get(name, "")
    values = tuple(v.strip() for v in raw.split(",") if v.strip())
    try:
        return tuple(str(ipaddress.ip_network(v, strict=False)) for v in values)
    except ValueError:
        raise ImproperlyConfigured(
            f"{name} must list IP networks in CIDR form (comma-separated), not {raw!r}"
        ) from None


def envfernetkey(name: str, *, derived_from: str) -> str:
    """A Fernet key (32 url-safe base64 bytes); unset, one derived from ``derived_from``."""
    value = os.environ.get(name, "")
    if not value:
        digest = hashlib.sha256(b"promptmanager-workspace-secrets:" + derived_from.encode()).digest()
        return base64.urlsafe_b64encode(digest).decode()
    try:
        valid = len(base64.urlsafe_b64decode(value.encode())) == 32
    except (binascii.Error, ValueError):
        valid = False
    if not valid:
        raise ImproperlyConfigured(
            f"{name} must be a Fernet key (32 bytes, url-safe base64), e.g. from "
            "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'"
        )
    return value


def envexecutable(name: str) -> str:
    """An optional path to an executable file; empty when unset."""
    value = os.environ.get(name, "")
    if value and not (os.path.isfile(value) and os.access(value, os.X_OK)):
        raise ImproperlyConfigured(f"{name}={value!r} is not an executable file")
    return value


DEBUG = envbool("DEBUG", "true")
_DEV_SECRET = "dev-only-insecure-secret-key-change-me-0123456789"
SECRET_KEY = envstr("SECRET_KEY", _DEV_SECRET if DEBUG else "")
if not SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
ALLOWED_HOSTS = [h.strip() for h in envstr("ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in envstr("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "core",
    "promptmgr",
    "askuser",
    # Only for its templates and static files: /api/docs then loads Swagger UI from here, not a CDN.
    "ninja",
]

# Django's own middleware, run on the event loop rather than a thread per step (core/middleware.py).
MIDDLEWARE = [
    "core.middleware.SecurityMiddleware",
    "promptmgr.security.CSPMiddleware",
    "core.middleware.SessionMiddleware",
    "core.middleware.CommonMiddleware",
    "core.middleware.CsrfViewMiddleware",
    "core.middleware.AuthenticationMiddleware",
    "core.middleware.MessageMiddleware",
    "core.middleware.XFrameOptionsMiddleware",
]

# Content-Security-Policy (django-csp): everything from this origin, no inline scripts,
# styles or handlers (the pages' scripts are files in static/js), no framing.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

ROOT_URLCONF = "promptmgr.urls"
ASGI_APPLICATION = "promptmgr.asgi.application"

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
                "promptmgr.context_processors.product",
            ],
        },
    },
]

VAR_DIR = Path(envstr("VAR_DIR", str(BASE_DIR / "var")))
# The default SQLite file and run secrets live here; create it so a fresh clone just works.
VAR_DIR.mkdir(parents=True, exist_ok=True)
DATABASES = {
    "default": dj_database_url.parse(
        envurl(
            "DATABASE_URL",
            f"sqlite:///{VAR_DIR / 'db.sqlite3'}",
            schemes={"sqlite", "postgres", "postgresql", "pgsql"},
        ),
        # Requests run on pooled long-lived threads (REQUEST_THREADS), so a connection
        # outlives its request: opening one per request cost more than the query.
        conn_max_age=envint("DB_CONN_MAX_AGE", "600", minimum=0, maximum=86400),
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Runs write from several threads; wait for the lock rather than fail with "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        # WAL: readers never wait for the writer, and a commit costs no full fsync.
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file, not memory, so the test server's threads and the test share one database.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-db-{os.getpid()}.sqlite3")}
else:
    # Test databases named after the checkout: two checkouts' test runs against one PostgreSQL
    # never drop each other's, and what an interrupted run left behind is the next run's to
    # drop and make afresh. pytest-django adds _gwN for each pytest-xdist worker.
    _checkout = hashlib.sha256(str(BASE_DIR).encode()).hexdigest()[:8]
    DATABASES["default"]["TEST"] = {"NAME": f"test_{DATABASES['default']['NAME']}_{_checkout}"}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
# Django's ModelBackend with the user's load compiled once (core/auth.py says why).
AUTHENTICATION_BACKENDS = ["core.auth.ModelBackend"]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/projects/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Django's database sessions, loaded by one plain SELECT (core.sessions says why).
SESSION_ENGINE = "core.sessions"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"

# --- PromptManager -------------------------------------------------------------------

REDIS_KEY_PREFIX = envstr("REDIS_KEY_PREFIX", "pm")
# Per web worker: each ask-user long-poll holds one while it waits (SSE streams share one per run).
REDIS_MAX_CONNECTIONS = envint("REDIS_MAX_CONNECTIONS", "2000", minimum=10, maximum=100000)
# How long a run keeps its events while Redis is unreachable (then it fails), and how long
# an open SSE stream waits for Redis (then it ends with a retry hint).
REDIS_OUTAGE_SECONDS = envint("REDIS_OUTAGE_SECONDS", "60", minimum=1, maximum=3600)
# Each connection names its part of the worker in Redis's CLIENT LIST (CLIENT SETNAME; the
# footprint benchmark counts by these). Off by default: a Redis whose ACL refuses CLIENT
# commands, as managed services may, would refuse every connection that names itself.
REDIS_CLIENT_NAMES = envbool("REDIS_CLIENT_NAMES", "false")
REDIS_URL = envurl("REDIS_URL", "redis://127.0.0.1:6379/0", schemes={"redis", "rediss", "unix"})
STORAGE_ROOT = Path(envstr("STORAGE_ROOT", str(VAR_DIR / "storage")))
# Per-run ask-user config files (secrets) live here, in 0700 directories.
RUN_SECRETS_DIR = Path(envstr("RUN_SECRETS_DIR", str(VAR_DIR / "run-secrets")))

# Where the CLI's MCP server reaches this app; it must stay on loopback.
INTERNAL_BASE_URL = envurl("INTERNAL_BASE_URL", "http://127.0.0.1:8000", schemes={"http", "https"})

ANTHROPIC_API_KEY = envstr("ANTHROPIC_API_KEY", "")
# Without a key the offline demo model, mounted in this app, answers instead of Claude.
DEMO_MODEL = not ANTHROPIC_API_KEY
DEMO_MODEL_PATH = "/_demo_model"
ANTHROPIC_BASE_URL = envurl(
    "ANTHROPIC_BASE_URL",
    INTERNAL_BASE_URL.rstrip("/") + DEMO_MODEL_PATH if DEMO_MODEL else "https://api.anthropic.com",
    schemes={"http", "https"},
)
CLAUDE_CLI_PATH = envexecutable("CLAUDE_CLI_PATH")
# The CLI runs this much "nicer" than the server (0 = the same priority): when the CPUs
# are busy, the server's small, latency-bound work per line goes first (see processes.py).
CLAUDE_CLI_NICE = envint("CLAUDE_CLI_NICE", "10", minimum=0, maximum=19)
# Claude's tools run in Claude Code's own sandbox (bubblewrap, see promptmgr/sandbox.py);
# only an explicit off runs them unconfined (an empty value keeps the sandbox on).
CLAUDE_SANDBOX = envbool("CLAUDE_SANDBOX", "on") if os.environ.get("CLAUDE_SANDBOX", "").strip() else True
# "run": one sandbox per run that every command enters (about 7 ms a command);
# "command": Claude Code's own sandbox, a new one per command (about 65 ms). Same
# filesystem policy; both reach off-machine hosts through a proxy, never the server's loopback.
CLAUDE_SANDBOX_SCOPE = envchoice("CLAUDE_SANDBOX_SCOPE", "run", choices=("run", "command"))
# Networks that are not public but that the run scope's commands may reach all the same
# (a private package registry's); the loopback, private and link-local ones are closed otherwise.
CLAUDE_SANDBOX_EGRESS_ALLOW = envnetworks("CLAUDE_SANDBOX_EGRESS_ALLOW")

ASK_USER_ENABLED = envbool("ASK_USER_ENABLED", "true")
# How the CLI starts the ask-user MCP server (a JSON list: program and arguments). An
# operator may wrap it (the benchmarks put a tracing tee in front); it is also the one
# command line the run sandbox starts outside (promptmgr/run_sandbox.py).
ASK_USER_MCP_COMMAND = envcommand("ASK_USER_MCP_COMMAND", [sys.executable, "-P", "-m", "mcp_server"])
# Runs' MCP servers are forked from a warm server that imported the SDK once (askuser/warm_server.py),
# which ends this long after the worker's last ask-user run.
ASK_USER_WARM_SERVER = envbool("ASK_USER_WARM_SERVER", "true")
ASK_USER_WARM_IDLE_SECONDS = envint("ASK_USER_WARM_IDLE_SECONDS", "60", minimum=1, maximum=86400)
ASK_USER_DEFAULT_TIMEOUT = envint("ASK_USER_DEFAULT_TIMEOUT", "300", minimum=30, maximum=900)
# How long poll-answer holds a request open before answering 202 "waiting".
ASK_USER_LONG_POLL_SECONDS = envint("ASK_USER_LONG_POLL_SECONDS", "25", minimum=1, maximum=60)
# Answering by policy (askuser.policy): the model its agent asks, and how long it may take.
ANSWER_POLICY_MODEL = envstr("ANSWER_POLICY_MODEL", "claude-sonnet-5-5")
ANSWER_POLICY_TIMEOUT = envint("ANSWER_POLICY_TIMEOUT", "60", minimum=5, maximum=600)

RUN_MAX_DURATION = envint("RUN_MAX_DURATION", "3600", minimum=10, maximum=86400)
RUN_IDLE_TIMEOUT = envint("RUN_IDLE_TIMEOUT", "600", minimum=5, maximum=86400)
RUNS_PER_USER = envint("RUNS_PER_USER", "3", minimum=1, maximum=1000)
RUNS_GLOBAL = envint("RUNS_GLOBAL", "20", minimum=1, maximum=10000)
# Each read of the CLI waits this long; each timeout checks for an unshown question and refreshes ownership.
RUN_READ_TIMEOUT = 2.0
# How often every worker looks for runs whose owner is gone (and fails them).
RUN_SWEEP_SECONDS = envint("RUN_SWEEP_SECONDS", "10", minimum=1, maximum=3600)
# Where runs execute (promptmgr.run_queue): "embedded", a queue worker inside each web
# process (one command runs everything); "off", web processes only accept, stream and
# relay, and `python manage.py runworker` processes run the turns.
RUN_WORKER = envchoice("RUN_WORKER", "embedded", choices=("embedded", "off"))
# Runs one worker process executes at once (its queue prefetch is never higher).
RUN_WORKER_CONCURRENCY = envint("RUN_WORKER_CONCURRENCY", str(RUNS_GLOBAL), minimum=1, maximum=1000)
# Long-lived threads that run requests' synchronous steps (promptmgr.request_threads);
# each holds a database connection. Past them a request gets a thread of its own.
REQUEST_THREADS = envint("REQUEST_THREADS", "8", minimum=1, maximum=256)
SSE_HEARTBEAT_SECONDS = envint("SSE_HEARTBEAT_SECONDS", "15", minimum=1, maximum=60)
EVENT_STREAM_TTL = envint("EVENT_STREAM_TTL", "86400", minimum=60, maximum=30 * 86400)

# --- Workspaces from git ---------------------------------------------------------------
# URL schemes a project may be cloned over (git's protocol allow-list follows it). "file"
# lets a project read any repository on this server: only an operator adds it. git's
# ext:: and fd:: transports run commands and are never allowed.
WORKSPACE_GIT_SCHEMES = envschemes(
    "WORKSPACE_GIT_SCHEMES", "https,ssh", known={"https", "ssh", "http", "git", "file"}, refused={"ext", "fd"}
)
# Encrypts projects' access tokens and deploy keys (Fernet). Unset, it is derived from
# SECRET_KEY, so changing SECRET_KEY makes stored credentials unreadable: set it in production.
WORKSPACE_SECRET_KEY = envfernetkey("WORKSPACE_SECRET_KEY", derived_from=SECRET_KEY)
WORKSPACE_CLONE_TIMEOUT = envint("WORKSPACE_CLONE_TIMEOUT", "900", minimum=5, maximum=86400)
WORKSPACE_CLONE_MAX_MB = envint("WORKSPACE_CLONE_MAX_MB", "2048", minimum=1, maximum=1_000_000)
WORKSPACE_SETUP_TIMEOUT = envint("WORKSPACE_SETUP_TIMEOUT", "600", minimum=1, maximum=86400)
# A conversation's worktree unused this long is removed by `manage.py sweep_worktrees`
# (its uncommitted work committed on its branch first).
WORKTREE_IDLE_DAYS = envint("WORKTREE_IDLE_DAYS", "14", minimum=1, maximum=3650)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "promptmgr": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
        "askuser": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
        "core": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
        # The run queue's own lines: a failed actor, a lost broker connection.
        "dramatiq": {"handlers": ["console"], "level": "WARNING"},
    },
}
