"""The URL converter for a run id (DESIGN.md §9: any stored run id can be opened).

A run id is one path segment. WSGI servers percent-decode the path before Django routes it, so a run
id holding `/` cannot travel as a plainly percent-encoded segment: `a%2Fb` would arrive as `a/b` and no
longer be one segment. So `to_url` percent-encodes the two characters that would change the segment
after that decoding, `%` and `/` (a first layer); `reverse()` then percent-encodes the result as usual
(`?`, `#`, spaces, non-ASCII, and the `%` of the first layer), the server decodes that, and `to_python`
decodes the first layer. Ordinary ids come out unchanged, so `/projects/1/runs/8b2685b6-…` stays
readable. `.` and `..` are encoded too: browsers would otherwise treat them as dot segments and walk
up the path (and they treat `%2E` alike, hence the second layer: `%252E`).
"""

from __future__ import annotations

from urllib.parse import unquote

from django.urls import register_converter


def encode_run_id(run_id: str) -> str:
    """The run id as its (first-layer) path segment; `reverse()` adds the second layer."""
    if run_id in (".", ".."):
        return "%2E" * len(run_id)
    return run_id.replace("%", "%25").replace("/", "%2F")


class RunIdConverter:
    regex = "[^/]+"

    def to_python(self, value: str) -> str:
        # errors="replace": a stray non-UTF-8 sequence becomes U+FFFD instead of raising; such an id
        # is never stored, so the lookup finds nothing and answers 404. A NUL (from `%2500`) can match
        # no stored id either, and PostgreSQL refuses it in a query: no match (404) at once.
        run_id = unquote(value, errors="replace")
        if "\x00" in run_id:
            raise ValueError("a run id holds no NUL")
        return run_id

    def to_url(self, value: str) -> str:
        return encode_run_id(str(value))


class IdConverter:
    """`<id:name>`: a row id or a turn number in a URL, at most 18 digits. Django's `int` takes any
    number of digits, and a value past the database's 64-bit integers makes the lookup itself fail
    (OverflowError on SQLite, an error on PostgreSQL): a 500 instead of the 404 it is."""

    regex = "[0-9]{1,18}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


# Registered once, here (re-registering a name is deprecated in Django 5.1+); both URL modules import
# this module before using `<run_id:run_id>` or `<id:…>`.
register_converter(RunIdConverter, "run_id")
register_converter(IdConverter, "id")
