"""List import circles between the modules of `traces/` (lazy imports inside functions count too;
imports under `if TYPE_CHECKING:` do not), and every import of another module's `_private` name in
`runtime/` and `traces/` (a private module is fine: `from . import _json_text`; a private name is
not: `from .slots import _Slot`).

    $ .venv/bin/python scripts/import_cycles.py      # exit 1 when a circle is found
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "traces"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in (ROOT / PACKAGE).rglob("*.py") if "migrations" not in p.parts}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for n in ast.walk(block)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:  # annotations only: never imported at run time
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                # `from pkg import mod` needs the module, not the package's other names: the
                # package itself counts only when a name imported from it is not a module.
                submodules = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
                targets = submodules + ([base] if len(submodules) < len(node.names) else [])
            for target in targets:
                # The deepest module of ours the import names (a package's __init__ included).
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith(PACKAGE):
                    edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def private_imports(folders: tuple[str, ...] = ("runtime", "traces")) -> list[str]:
    """`file:line: name` for each `from module import _name` where `_name` is not a module."""
    found: list[str] = []
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
                    continue
                base = path.parent
                if node.level:
                    for _ in range(node.level - 1):
                        base = base.parent
                    target = base.joinpath(*(node.module or "").split(".")) if node.module else base
                else:
                    target = ROOT.joinpath(*(node.module or "").split("."))
                for alias in node.names:
                    name = alias.name
                    is_module = (target / f"{name}.py").exists() or (target / name / "__init__.py").exists()
                    if name.startswith("_") and not name.startswith("__") and not is_module:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: imports private {name}")
    return found


def main() -> int:
    found = cycles(graph())
    for component in found:
        print("import circle: " + " <-> ".join(component))
    if not found:
        print("no import circle in traces/")
    private = private_imports()
    print("\n".join(private) if private else "no import of another module's private name")
    return 1 if found or private else 0


if __name__ == "__main__":
    sys.exit(main())
