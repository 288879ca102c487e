"""List production modules over 600 lines and functions over 80 lines (the README's size rule).

A long function is allowed when its docstring says why, in a sentence starting "Long because".

    $ .venv/bin/python scripts/sizes.py            # exit 1 when something is listed
    $ .venv/bin/python scripts/sizes.py runtime    # only these folders
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("runtime", "traces", "arcana_site")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
REASON = "Long because"


def offenders(folders: tuple[str, ...] = FOLDERS) -> list[str]:
    found: list[str] = []
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            rel = path.relative_to(ROOT)
            source = path.read_text(encoding="utf-8")
            lines = source.count("\n") + 1
            if lines > MAX_MODULE_LINES:
                found.append(f"{rel}: {lines} lines (module over {MAX_MODULE_LINES})")
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION_LINES and REASON not in (ast.get_docstring(node) or ""):
                        found.append(
                            f"{rel}:{node.lineno}: {node.name}() {length} lines (function over {MAX_FUNCTION_LINES})"
                        )
    return found


def main(argv: list[str]) -> int:
    found = offenders(tuple(argv) or FOLDERS)
    print("\n".join(found) if found else "no module or function over the limits")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
