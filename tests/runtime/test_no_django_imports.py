"""`runtime/` never imports Django, DRF, Celery or `traces` (DESIGN.md §2): proved by reading the code
with `ast`, and by importing the package in a process with no Django settings."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtime"
FORBIDDEN = ("django", "rest_framework", "celery", "traces")


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in (
            "import_module",
            "__import__",
        ):
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def _runtime_files() -> list[Path]:
    return sorted(RUNTIME.rglob("*.py"))


def test_there_are_runtime_files_to_check() -> None:
    assert len(_runtime_files()) >= 10


@pytest.mark.parametrize("path", _runtime_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_it_does_not_import_django_drf_celery_or_traces(path: Path) -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for line, name in _imports(path)
        if name.split(".")[0] in FORBIDDEN
    ]
    assert bad == []


def test_the_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text(
        "import os\nfrom django.db import models\nimport importlib\nimportlib.import_module('celery')\n"
    )
    assert [name for _, name in _imports(sample)] == ["os", "django.db", "importlib", "celery"]


def test_it_imports_without_django_settings() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    code = (
        "import sys, runtime\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'rest_framework', 'celery', 'traces'))\n"
        "print(','.join(bad))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""
