"""Plain-text rendering for the `arcana` CLI: tables, previews and safe output.

Trace text is untrusted. Nothing here interprets markup (there is no markup language at all, so
`[pinned: x]` prints as written — Arcana 1.2's CLI swallowed it, its §7 item 12), and every line goes
through `safe_text()` before it reaches the terminal, so ANSI escapes, other control characters and
bidirectional overrides inside a trace are shown as inert `\\x1b`-style text instead of acting.

    >>> safe_text("ok\\x1b[2Jgone")
    'ok\\\\x1b[2Jgone'
    >>> truncate("abcdef", 4)
    'abc…'
    >>> print("\\n".join(table(["ID", "N"], [["a", "1"], ["bb", "22"]], align="lr")))
    ID   N
    --  --
    a    1
    bb  22
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

__all__ = ["Output", "display_width", "dumps_json", "one_line", "safe_text", "table", "truncate"]

# C0 controls (tab and newline handled by the caller), DEL, C1 controls, and the Unicode bidi
# embedding/override/isolate characters that can make a terminal line read differently than it is.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe_text(text: Any, *, keep_newlines: bool = False) -> str:
    """`text` as a string that a terminal shows literally: control characters (ESC included),
    DEL, C1 controls and bidi overrides become visible `\\xNN` / `\\uNNNN` escapes; tabs become a
    space; newlines become `⏎` unless `keep_newlines`."""
    s = text if isinstance(text, str) else str(text)
    s = s.replace("\r\n", "\n").replace("\t", " ")
    if not keep_newlines:
        s = s.replace("\n", "⏎")
    s = s.replace("\r", "\\x0d")
    return _UNSAFE.sub(_escape, s)


def display_width(text: str) -> int:
    """Columns `text` takes in a terminal (wide East-Asian characters count 2, combining marks 0)."""
    width = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        width += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return width


def truncate(text: str, width: int) -> str:
    """`text` cut to at most `width` columns, ending in "…" when something was cut."""
    if display_width(text) <= width:
        return text
    out: list[str] = []
    used = 0
    for ch in text:
        w = 0 if unicodedata.combining(ch) else (2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + "…"


def one_line(text: Any, width: int) -> str:
    """A safe single-line preview of `text`, at most `width` columns."""
    if text is None:
        return ""
    return truncate(safe_text(text), width)


def _pad(text: str, width: int, align: str) -> str:
    gap = max(0, width - display_width(text))
    return " " * gap + text if align == "r" else text + " " * gap


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    align: str = "",
    max_widths: Sequence[int | None] | None = None,
    indent: str = "",
) -> list[str]:
    """Aligned plain-text table lines: a header, a dash rule, then rows.

    `align` holds one letter per column, `l` or `r` (default `l`). Cells are made safe and, when
    `max_widths[i]` is set, truncated with "…". Trailing spaces are stripped.
    """
    cells = [[safe_text("" if c is None else c) for c in row] for row in rows]
    if max_widths:
        caps = list(max_widths)
        cells = [
            [truncate(c, cap) if i < len(caps) and (cap := caps[i]) else c for i, c in enumerate(row)]
            for row in cells
        ]
    widths = [display_width(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], display_width(c))
    aligns = [(align[i] if i < len(align) else "l") for i in range(len(headers))]

    def fmt(row: Sequence[str]) -> str:
        return (indent + "  ".join(_pad(c, widths[i], aligns[i]) for i, c in enumerate(row))).rstrip()

    lines = [fmt(list(headers)), fmt(["-" * w for w in widths])]
    lines.extend(fmt(row) for row in cells)
    return lines


_JSON_UNSAFE = re.compile("[\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def dumps_json(value: Any) -> str:
    """Indented JSON that is also safe on a terminal: `json` already escapes C0 controls; DEL, C1
    controls and bidi characters (which can only occur inside strings) are escaped as `\\uXXXX` too."""
    text = json.dumps(value, ensure_ascii=False, indent=2, default=str)
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class Output:
    """Collects lines and writes them through `safe_text` — the one way the CLI prints trace text."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def line(self, text: str = "") -> None:
        """Print one line; embedded newlines/control characters are neutralised."""
        self.stream.write(safe_text(text) + "\n")

    def lines(self, texts: Iterable[str]) -> None:
        for t in texts:
            self.line(t)

    def block(self, text: str, *, indent: str = "") -> None:
        """Print multi-line trace text line by line (its newlines kept, everything else neutralised)."""
        for part in safe_text(text, keep_newlines=True).split("\n"):
            self.stream.write(indent + part + "\n")

    def raw_json(self, value: Any) -> None:
        self.stream.write(dumps_json(value) + "\n")
