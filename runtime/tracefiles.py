"""Finding trace files, decoding their lines and drawing an import's progress: one way for
`arcana trace upload`, the reader and `manage.py import_traces` / ingestion (and `setup_demo`).

    >>> trace_files(["./arcana-traces", "extra/run.jsonl.gz"])      # folders searched recursively, sorted
    >>> progress_bar(1, 2)
    '[###############...............]  50% 1/2 lines'
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ._public import publish as _publish
from ._trace import decode_jsonl_line

__all__ = ["TRACE_SUFFIXES", "decode_jsonl_line", "is_trace_file", "progress_bar", "trace_files"]

#: The file names a trace folder is searched for: JSONL, plain or gzipped.
TRACE_SUFFIXES: tuple[str, ...] = (".jsonl", ".jsonl.gz")


def is_trace_file(path: Path) -> bool:
    """True for an existing file whose name ends in `.jsonl` or `.jsonl.gz`."""
    return path.is_file() and path.name.endswith(TRACE_SUFFIXES)


def trace_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The files named, and the trace files under the folders named (recursively, sorted), in the
    order given. A file named explicitly is taken whatever its suffix.

    Raises `FileNotFoundError` for a path that does not exist and for a folder holding no trace
    file, so a typo never reads as "nothing to import"."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(q for q in path.rglob("*") if is_trace_file(q))
            if not found:
                raise FileNotFoundError(f"{path}: no .jsonl or .jsonl.gz files in this directory")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"{path}: no such file or directory")
    return files


def progress_bar(done: int, total: int | None, width: int = 30) -> str:
    """A one-line bar of `done` out of `total` lines; an empty bar while the total is unknown."""
    if not total:
        return "[" + " " * width + "]"
    frac = min(1.0, done / total)
    filled = int(round(frac * width))
    return "[" + "#" * filled + "." * (width - filled) + f"] {frac:4.0%} {done}/{total} lines"


# Reprs, tracebacks and pickles name this module, not the private one (runtime/_public.py).
_publish(globals())
