"""JSON texts of the messages a conversation sends again at every step, encoded once.

A step's request repeats the history of the step before, so encoding every message again (for the
request body, for the request digest) cost more than the rest of the runtime's bookkeeping. A message
is remembered under `content_key(message)`, a key equal for two values exactly when their JSON is
equal by construction (same types, same keys in the same order, same contents); a value that cannot
be keyed is encoded every time. Two encodings are kept: `compact_text` (what a request body holds:
compact separators, no ASCII escaping, keys in their order) and `canonical_text` (what digests hash:
sorted keys as well).

`splice_dumps` encodes an object one of whose values is a list of such texts: the object is encoded
with a marker where the list goes, and the marker's text is replaced by the list's, so the bytes are
those `json.dumps` gives for the whole object.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any, cast

__all__ = [
    "MessageTexts",
    "canonical_of",
    "canonical_text",
    "canonical_utf8",
    "compact_of",
    "compact_text",
    "compact_utf8",
    "content_key",
    "flat_texts",
    "message_texts",
    "splice_dumps",
    "splice_dumps_utf8",
]

#: Remember texts across calls (and resume request digests); False encodes every value every time
#: (the reference the tests compare against).
REMEMBER = True

_CACHE_SIZE = 16_384
_COMPACT: dict[Any, str] = {}
_CANONICAL: dict[Any, str] = {}

# A string no caller's value is taken to hold: it is only replaced when its JSON text occurs exactly
# once in the encoded object (the marker itself), otherwise the object is encoded whole.
_MARKER = "\x00arcana-console-spliced-list\x00"
_MARKER_TEXT = json.dumps(_MARKER, ensure_ascii=False)


def content_key(value: Any) -> Any:
    """A hashable key equal for two values exactly when their JSON is equal by construction (same
    types, same keys in the same order, same contents); None for anything else (then no caching).
    Strings are their own keys (Python keeps a string's hash, so a history's strings hash once);
    other scalars carry their type, because `1`, `1.0` and `True` are equal in Python but not in
    JSON."""
    cls = value.__class__
    if cls is str:
        return ("s", value)
    if value is None:
        return None.__class__
    return _nested_key(value)


class MessageTexts:
    """The two texts of one keyed value (`compact`, `canonical`) and their UTF-8 bytes, each encoded
    when first asked for, shared by every value with the same `content_key`."""

    __slots__ = ("compact", "canonical", "compact_utf8", "canonical_utf8")

    def __init__(self) -> None:
        self.compact: str | None = None
        self.canonical: str | None = None
        self.compact_utf8: bytes | None = None
        self.canonical_utf8: bytes | None = None


_TEXTS: dict[Any, MessageTexts] = {}


def message_texts(
    values: Sequence[Any], known: Sequence[MessageTexts | None] | None = None
) -> list[MessageTexts | None]:
    """The `MessageTexts` of each value, found under its `content_key` (None for a value that cannot
    be keyed): a step keys and looks up its messages once, for both the request body
    (`compact_of`) and the request digest (`canonical_of`). `known`, if given (one per value), holds
    entries the caller knows belong to a value with the same JSON texts (a working set's
    `message_texts`: the same message as at the step before); the others are looked up."""
    if not REMEMBER:
        return [None] * len(values)
    texts = _TEXTS
    if known is None or len(known) != len(values):
        out: list[MessageTexts | None] = [None] * len(values)
    else:
        out = list(known)
        if None not in out:  # every entry known (found in C)
            return out
    for i, entry in enumerate(out):
        if entry is not None:
            continue
        key = content_key(values[i])
        if key is None:
            continue
        entry = texts.get(key)
        if entry is None:
            if len(texts) >= _CACHE_SIZE:
                texts.clear()  # entries already handed out stay valid: they belong to their key
            entry = texts[key] = MessageTexts()
        out[i] = entry
    return out


def compact_utf8(values: Sequence[Any], entries: Sequence[MessageTexts | None]) -> list[bytes]:
    """`[compact_of(v, e).encode("utf-8") for v, e in zip(values, entries)]`, each entry's bytes
    encoded once: a request body is the bytes of its messages' texts joined (`splice_dumps_utf8`),
    so the history is not encoded to UTF-8 again at every step (slow for a text holding one
    character outside ASCII: then the whole text is). The bytes already made are read in C."""
    return _utf8(values, entries, "compact_utf8", compact_of)


def canonical_utf8(values: Sequence[Any], entries: Sequence[MessageTexts | None]) -> list[bytes]:
    """`[canonical_of(v, e).encode("utf-8") for v, e in zip(values, entries)]`, as `compact_utf8`
    makes them (what a request digest hashes)."""
    return _utf8(values, entries, "canonical_utf8", canonical_of)


def _utf8(
    values: Sequence[Any],
    entries: Sequence[MessageTexts | None],
    slot: str,
    text_of: Callable[[Any, MessageTexts | None], str],
) -> list[bytes]:
    """Each value's `text_of` text as UTF-8, kept on its entry's `slot` once encoded."""
    out: list[bytes | None] = list(map(getattr, entries, repeat(slot), repeat(None)))
    if None in out:
        for i, data in enumerate(out):
            if data is None:
                entry = entries[i]
                data = out[i] = text_of(values[i], entry).encode("utf-8")
                if entry is not None:
                    setattr(entry, slot, data)
    return cast("list[bytes]", out)


def compact_of(value: Any, entry: MessageTexts | None) -> str:
    """`compact_text(value)`; `entry` must be `value`'s entry from `message_texts` (or None)."""
    if entry is None:
        return compact_text(value)
    text = entry.compact
    if text is None:
        text = entry.compact = _compact(value)
    return text


def canonical_of(value: Any, entry: MessageTexts | None) -> str:
    """`canonical_text(value)`; `entry` must be `value`'s entry from `message_texts` (or None)."""
    if entry is None:
        return canonical_text(value)
    text = entry.canonical
    if text is None:
        text = entry.canonical = _canonical(value)
    return text


def _nested_key(value: Any) -> Any:
    """`content_key` of a value that is neither a string nor None. Inside dicts and lists a string or
    None stands for itself (every other value's key is a tuple or None), so the key of a message
    holding only strings and None is its items as they are."""
    cls = value.__class__
    if cls is dict:
        for k, v in value.items():
            if k.__class__ is not str or (v is not None and v.__class__ is not str):
                break
        else:
            return ("d", *value.items())
        items: list[Any] = ["d"]
        for k, v in value.items():
            if k.__class__ is not str:
                return None
            if v is None or v.__class__ is str:
                items.append((k, v))
                continue
            vk = _nested_key(v)
            if vk is None:
                return None
            items.append((k, vk))
        return tuple(items)
    if cls is list:
        out: list[Any] = ["l"]
        for v in value:
            if v is None or v.__class__ is str:
                out.append(v)
                continue
            vk = _nested_key(v)
            if vk is None:
                return None
            out.append(vk)
        return tuple(out)
    if cls is int or cls is bool:
        return (cls.__name__, value)
    if cls is float:
        return ("f", repr(value))  # repr tells -0.0 from 0.0 (equal in Python, not in JSON)
    return None


_FLAT: dict[Any, str] = {}
_FLAT_TYPES = frozenset((str, int, bool, float, None.__class__))


def _flat_key(d: Any) -> Any:
    """The key of a dict of strings, ints, bools, floats and None, exact about types (of keys and
    values) and key order; None for anything else. Equal floats have the same JSON except 0.0 and
    -0.0, so a dict holding a float zero is keyed by its floats' `repr`."""
    if d.__class__ is not dict:
        return None
    keys = tuple(d)
    key_types = tuple(map(type, keys))  # True and 1 are equal keys, but encode as "true" and "1"
    values = tuple(d.values())
    value_types = tuple(map(type, values))
    if not _FLAT_TYPES.issuperset(value_types):
        return None
    if float in value_types and 0.0 in values:
        values = tuple(repr(x) if x.__class__ is float else x for x in values)
        return ("zero", keys, key_types, value_types, values)
    return ("typed", keys, key_types, value_types, values)


def flat_texts(items: list[Any]) -> list[str]:
    """`compact_text` of each item, for flat dicts (a context decision's message decisions: the same
    few values step after step) remembered under `_flat_key`."""
    out = []
    for d in items:
        key = _flat_key(d) if REMEMBER else None
        if key is None:
            out.append(_compact(d))
            continue
        text = _FLAT.get(key)
        if text is None:
            text = _compact(d)
            if len(_FLAT) >= _CACHE_SIZE * 4:
                _FLAT.clear()
            _FLAT[key] = text
        out.append(text)
    return out


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _cached(cache: dict[Any, str], encode: Any, value: Any, key: Any) -> str:
    if key is None or not REMEMBER:
        return str(encode(value))
    text = cache.get(key)
    if text is None:
        text = encode(value)
        if len(cache) >= _CACHE_SIZE:
            cache.clear()  # a simple bound; the next steps refill what they use
        cache[key] = text
    return text


def canonical_text(value: Any, key: Any = None) -> str:
    """`json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)`,
    remembered. `key`, if given, must be `content_key(value)`."""
    if not REMEMBER:
        return _canonical(value)
    return _cached(_CANONICAL, _canonical, value, key if key is not None else content_key(value))


def compact_text(value: Any, key: Any = None) -> str:
    """`json.dumps(value, separators=(",", ":"), ensure_ascii=False)`, remembered. `key`, if given,
    must be `content_key(value)`."""
    if not REMEMBER:
        return _compact(value)
    return _cached(_COMPACT, _compact, value, key if key is not None else content_key(value))


def _splice_ends(obj: dict[str, Any], path: Sequence[str]) -> tuple[str, str] | None:
    """The compact text of `obj` before and after the list at `path`, or None when that cannot be
    told apart (the marker's text also in a value). Only the dicts on `path` are copied."""
    top = dict(obj)
    node = top
    for key in path[:-1]:
        child = dict(node[key])
        node[key] = child
        node = child
    node[path[-1]] = _MARKER
    text = _compact(top)
    at = text.find(_MARKER_TEXT)
    end = at + len(_MARKER_TEXT)
    if at < 0 or text.find(_MARKER_TEXT, end) >= 0:
        return None
    return text[:at], text[end:]


def splice_dumps(obj: dict[str, Any], path: Sequence[str], texts: Sequence[str]) -> str:
    """`json.dumps(obj, separators=(",", ":"), ensure_ascii=False)` where the list at `path` (keys of
    nested dicts) is encoded as `"[" + ",".join(texts) + "]"`: `texts` must be the compact texts of
    that list's items. `obj` is not changed."""
    ends = _splice_ends(obj, path)
    if ends is None:  # encode whole
        return _compact(obj)
    head, tail = ends
    if not texts:
        return head + "[]" + tail
    # One join writes the whole text (the list's texts are most of it: the history of a request).
    items = list(texts)
    items[0] = head + "[" + items[0]
    items[-1] = items[-1] + "]" + tail
    return ",".join(items)


def splice_dumps_utf8(obj: dict[str, Any], path: Sequence[str], pieces: Sequence[bytes]) -> bytes:
    """`splice_dumps(obj, path, texts).encode("utf-8")` where `pieces` are the UTF-8 bytes of
    `texts` (the UTF-8 of a concatenation is the concatenation of the UTF-8s)."""
    ends = _splice_ends(obj, path)
    if ends is None:
        return _compact(obj).encode("utf-8")
    head, tail = ends[0].encode("utf-8"), ends[1].encode("utf-8")
    if not pieces:
        return head + b"[]" + tail
    items = list(pieces)
    items[0] = head + b"[" + items[0]
    items[-1] = items[-1] + b"]" + tail
    return b",".join(items)
