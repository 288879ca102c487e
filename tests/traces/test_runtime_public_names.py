"""`traces/` and `arcana_site/` import only the runtime's public names (DESIGN.md §2, STYLE.md item 1):
no `runtime._…` module, no `_name` from a public one."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "runtime":
            if any(part.startswith("_") for part in node.module.split(".")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} from {node.module}")
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno} {a.name} from {node.module}"
                for a in node.names
                if a.name.startswith("_")
            ]
        elif isinstance(node, ast.Import):
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno} import {a.name}"
                for a in node.names
                if a.name.split(".")[0] == "runtime" and any(p.startswith("_") for p in a.name.split("."))
            ]
    return found


def test_it_imports_only_public_runtime_names() -> None:
    files = [p for d in ("traces", "arcana_site") for p in sorted((ROOT / d).rglob("*.py"))]
    assert len(files) > 20
    assert [hit for p in files for hit in _private_imports(p)] == []
