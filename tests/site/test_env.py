"""The settings helpers parse the environment strictly and name the variable they reject."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from arcana_site.env import envbool, envbroker, envcache, envdatabase, envint, envlist
from tests.conftest import ROOT


def test_it_reads_booleans_strictly() -> None:
    assert envbool("DEBUG", default=False, environ={"DEBUG": "True"}) is True
    assert envbool("DEBUG", default=True, environ={"DEBUG": "False"}) is False
    assert envbool("DEBUG", default=True, environ={}) is True
    for bad in ("true", "1", "yes", "TRUE "):
        with pytest.raises(ImproperlyConfigured, match="DEBUG must be 'True' or 'False'"):
            envbool("DEBUG", default=False, environ={"DEBUG": bad})


def test_it_rejects_bad_integers_with_the_variable_name() -> None:
    assert envint("ARCANA_MAX_UPLOAD_BYTES", default=5, environ={"ARCANA_MAX_UPLOAD_BYTES": "1_000"}) == 1000
    with pytest.raises(ImproperlyConfigured, match="ARCANA_MAX_UPLOAD_BYTES must be an integer"):
        envint("ARCANA_MAX_UPLOAD_BYTES", default=5, environ={"ARCANA_MAX_UPLOAD_BYTES": "10MB"})
    with pytest.raises(ImproperlyConfigured, match="ARCANA_MAX_UPLOAD_BYTES must be at least 1024"):
        envint("ARCANA_MAX_UPLOAD_BYTES", default=5, minimum=1024, environ={"ARCANA_MAX_UPLOAD_BYTES": "10"})


def test_it_rejects_empty_list_items() -> None:
    assert envlist("ALLOWED_HOSTS", default=[], environ={"ALLOWED_HOSTS": "a.example, b.example"}) == [
        "a.example",
        "b.example",
    ]
    with pytest.raises(ImproperlyConfigured, match="ALLOWED_HOSTS"):
        envlist("ALLOWED_HOSTS", default=[], environ={"ALLOWED_HOSTS": "a.example,,b"})


def test_it_switches_database_by_url() -> None:
    sqlite = envdatabase("DATABASE_URL", default="sqlite:///var/x.sqlite3", environ={})
    assert sqlite.to_django()["ENGINE"] == "django.db.backends.sqlite3"
    assert sqlite.name == "var/x.sqlite3"
    pg = envdatabase(
        "DATABASE_URL", default="", environ={"DATABASE_URL": "postgres://u:p%40ss@db.local:6543/arcana"}
    )
    conf = pg.to_django()
    assert conf["ENGINE"] == "arcana_site.postgres"
    assert (conf["NAME"], conf["USER"], conf["PASSWORD"], conf["HOST"], conf["PORT"]) == (
        "arcana",
        "u",
        "p@ss",
        "db.local",
        "6543",
    )
    for bad in ("mysql://x/y", "postgres://host/", "sqlite://", "postgres://h:notaport/db"):
        with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
            envdatabase("DATABASE_URL", default="", environ={"DATABASE_URL": bad})


def test_it_keeps_database_url_options() -> None:
    pg = envdatabase(
        "DATABASE_URL",
        default="",
        environ={"DATABASE_URL": "postgres://u@db.local/arcana?sslmode=require&connect_timeout=5"},
    ).to_django()
    assert pg["OPTIONS"] == {"sslmode": "require", "connect_timeout": 5}
    sqlite = envdatabase(
        "DATABASE_URL", default="sqlite:////tmp/x.sqlite3?timeout=60", environ={}
    ).to_django()
    assert sqlite["NAME"] == "/tmp/x.sqlite3"
    # Our SQLite defaults stay underneath what the URL says.
    assert sqlite["OPTIONS"] == {"timeout": 60, "transaction_mode": "IMMEDIATE"}


def test_it_accepts_only_celery_broker_urls() -> None:
    assert envbroker("CELERY_BROKER_URL", default="filesystem://", environ={}) == "filesystem://"
    assert envbroker("CELERY_BROKER_URL", default="", environ={"CELERY_BROKER_URL": "redis://h:6379/0"})
    with pytest.raises(ImproperlyConfigured, match="CELERY_BROKER_URL"):
        envbroker("CELERY_BROKER_URL", default="", environ={"CELERY_BROKER_URL": "localhost:6379"})


def _import_settings(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE")
    }
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-c", "import arcana_site.settings"],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_it_refuses_to_start_without_a_secret_key_when_debug_is_off() -> None:
    result = _import_settings({"DEBUG": "False"})
    assert result.returncode != 0
    assert "SECRET_KEY is not set, DEBUG is off" in result.stderr


def test_it_generates_a_development_key_when_debug_is_on() -> None:
    result = _import_settings({"DEBUG": "True"})
    assert result.returncode == 0, result.stderr


def test_it_names_a_bad_variable_at_start_up() -> None:
    result = _import_settings({"DEBUG": "yes"})
    assert result.returncode != 0
    assert "DEBUG must be 'True' or 'False', got 'yes'" in result.stderr


def test_it_signs_with_the_embedded_installations_key(tmp_path: Path) -> None:
    # scripts/run writes the key into the data folder; manage.py commands run as printed use it too.
    (tmp_path / "secret_key").write_text("the-embedded-key\n")
    clean = {
        k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE")
    }
    result = subprocess.run(
        [sys.executable, "-c", "import arcana_site.settings as s; print(s.SECRET_KEY)"],
        cwd=ROOT,
        env={**clean, "DEBUG": "False", "ARCANA_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "the-embedded-key"


@pytest.mark.parametrize("fmt", ["plain", "json"])
def test_it_logs_time_level_and_logger(fmt: str) -> None:
    code = (
        "import django, logging; django.setup(); "
        "logging.getLogger('traces.tasks').warning('upload %s reclaimed', 7)"
    )
    clean = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE",)}
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "arcana_site.settings", "SECRET_KEY": "x", "LOG_FORMAT": fmt},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    if fmt == "json":
        entry = json.loads(line)
        assert (entry["level"], entry["logger"], entry["message"]) == (
            "WARNING",
            "traces.tasks",
            "upload 7 reclaimed",
        )
        assert entry["time"].endswith("+00:00")
    else:
        assert re.fullmatch(
            r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING traces\.tasks upload 7 reclaimed", line
        )


def test_it_caches_in_memory_unless_a_redis_url_is_given() -> None:
    assert envcache("ARCANA_CACHE_URL", environ={})["BACKEND"].endswith("LocMemCache")
    shared = envcache("ARCANA_CACHE_URL", environ={"ARCANA_CACHE_URL": "redis://cache:6379/2"})
    assert shared == {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://cache:6379/2",
    }
    with pytest.raises(ImproperlyConfigured, match="ARCANA_CACHE_URL must be empty or a redis:// URL"):
        envcache("ARCANA_CACHE_URL", environ={"ARCANA_CACHE_URL": "memcached://cache:11211"})


def test_a_shared_cache_is_keyed_by_the_code_that_drew_it(tmp_path: Path) -> None:
    """Two processes with the same ARCANA_CACHE_URL share entries; the key prefix is a digest of the
    templates and code, so a deployment with other templates does not read them."""
    broker = os.environ.get("CELERY_BROKER_URL", "")
    if not broker.startswith("redis://"):
        if os.environ.get("ARCANA_REQUIRE_SERVICES") == "1":
            pytest.fail("CELERY_BROKER_URL must name the Redis server this test uses")
        pytest.skip("needs Redis (CELERY_BROKER_URL=redis://…)")
    cache_url = broker.rsplit("/", 1)[0] + "/12"
    code = (
        "import django, os, sys; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'arcana_site.settings'); "
        "django.setup(); from django.conf import settings; from django.core.cache import cache; "
        "cache.set('probe', sys.argv[1]) if sys.argv[1] else None; "
        "print(settings.CACHES['default']['KEY_PREFIX'], cache.get('probe'))"
    )

    def run(value: str) -> list[str]:
        env = {**os.environ, "DEBUG": "True", "ARCANA_CACHE_URL": cache_url, "ARCANA_DATA_DIR": str(tmp_path)}
        env.pop("DJANGO_SETTINGS_MODULE", None)
        result = subprocess.run(
            [sys.executable, "-c", code, value], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.split()

    marker = f"drawn-{os.getpid()}"
    prefix, stored = run(marker)
    assert re.fullmatch(r"[0-9a-f]{12}", prefix) and stored == marker
    assert run("") == [prefix, marker]  # another process reads what the first one drew


# A value the shell takes as written without quotes: no space, quote, `$`, backslash, glob bracket,
# brace, `;`, `&`, `|`, `<`, `>`, `(`, `)` or `#` (a `?` or `*` is not expanded in an assignment).
BARE_VALUE = re.compile(r"[A-Za-z0-9_./:@?=,+%*-]*")


def env_example_values() -> dict[str, str]:
    """Every uncommented `NAME=value` of .env.example, with the value as written: inside single
    quotes when quoted, else bare (and then holding nothing the shell would change)."""
    out: dict[str, str] = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        m = re.fullmatch(r"([A-Z][A-Z0-9_]*)=(.*)", line)
        if m is None:
            assert not line.strip() or line.startswith("#"), f"not NAME=value nor a comment: {line!r}"
            continue
        name, value = m.groups()
        quoted = re.fullmatch(r"'([^']*)'", value)
        if quoted is not None:
            out[name] = quoted.group(1)
        else:
            assert BARE_VALUE.fullmatch(value), f"{name}: quote this value for the shell: {value!r}"
            out[name] = value
    return out


def test_the_env_example_loads_with_the_documented_command(tmp_path: Path) -> None:
    """`set -a; . ./.env; set +a` (README, docs/guide/deployment.md) puts every variable of
    .env.example into the environment exactly as written, and the providers' JSON parses."""
    (tmp_path / ".env").write_text((ROOT / ".env.example").read_text())
    dump = "import json, os; print(json.dumps(dict(os.environ)))"
    script = f"set -a; . ./.env; set +a; exec {sys.executable} -c '{dump}'"
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env={"PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    loaded = json.loads(done.stdout)
    expected = env_example_values()
    assert {"SECRET_KEY", "DATABASE_URL", "ARCANA_PROVIDERS", "OPENAI_API_KEY"} <= set(expected)
    assert {name: loaded.get(name) for name in expected} == expected
    providers = json.loads(loaded["ARCANA_PROVIDERS"])
    assert providers["openai"]["api_key_env"] == "OPENAI_API_KEY"
