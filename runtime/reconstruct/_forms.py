"""Message *forms*: one per distinct content of a run, whatever convention carried it.

A form's key is made of its role class and one key per unit of content, each normalized so that the
real variants of one message get one key:

* **text**: every text part of the message joined, with all whitespace removed (so a message split
  into several text parts, re-wrapped, or re-indented has the key of the original);
* **tool call**: the tool's name and its arguments as canonical JSON (a JSON text and the decoded
  value are the same; key order and spacing do not count); the call id is left out (frameworks
  renumber them);
* **tool result**: the result as canonical JSON or whitespace-free text; the id and the tool name
  are left out (Pydantic AI names it, the Chat Completions form does not);
* any other part: its canonical JSON without `id`.

The role class is the role, except that a message made only of tool results is `tool` whatever its
role (a `user` message with `tool_call_response` parts in Pydantic AI, a `tool` message in the
Chat Completions form), and the text of a `tool` message is a tool result.

Forms are interned per reconstruction (`FormTable`): equal keys give the same `Form` object, so the
alignment compares and hashes forms by identity.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._model import Message

__all__ = ["Form", "FormTable", "significant_words", "skeleton"]

_NON_ALNUM = re.compile(r"[\W_]+", re.UNICODE)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)

#: Words too common to say anything about what a text is about (for summary and instruction matching).
STOPWORDS = frozenset(
    """a an and are as at be been but by can did do does for from had has have he her his how i if in
    into is it its just me my no not of on or our she so than that the their them then there these they
    this to too us was we were what when where which who why will with would you your yes ok okay""".split()
)


def skeleton(text: str) -> str:
    """`text` lowercased with everything but letters and digits removed: what the fuzzy matches
    compare (JSON quoting, escaping, punctuation and spacing do not count).

    >>> skeleton('{"city": "Paris",\\n "day": 3}')
    'cityparisday3'
    """
    return _NON_ALNUM.sub("", text).lower()


def words(text: str) -> list[str]:
    """The lowercased words (letters and digits) of `text`, in order."""
    return _WORD.findall(text.lower())


def significant_words(text: str) -> frozenset[str]:
    """The words of `text` that say what it is about: not stopwords, at least 3 characters or a
    number."""
    return frozenset(w for w in words(text) if w not in STOPWORDS and (len(w) >= 3 or w.isdigit()))


class Form:
    """One distinct message content. `role` is the role class, `text` a readable flat text of all
    its units (what token counts, previews and fuzzy matches read), `tokens` its size as a message
    (text tokens + 3 per message, the Chat Completions overhead). `skel`, `wordset` and `digest` are
    made on first use."""

    __slots__ = ("key", "role", "kind", "text", "tokens", "_skel", "_words", "_digest", "_trigrams")

    def __init__(self, key: tuple[str, ...], role: str, kind: str, text: str, tokens: int) -> None:
        self.key = key
        self.role = role
        #: "text", "tool_call" (an assistant message with tool calls), "tool_result" or "empty"
        self.kind = kind
        self.text = text
        self.tokens = tokens
        self._skel: str | None = None
        self._words: frozenset[str] | None = None
        self._digest: str | None = None
        self._trigrams: frozenset[tuple[str, str, str]] | None = None

    def __repr__(self) -> str:
        return f"Form({self.role}, {self.text[:40]!r}, {self.tokens} tokens)"

    @property
    def skel(self) -> str:
        if self._skel is None:
            self._skel = skeleton(self.text)
        return self._skel

    @property
    def wordset(self) -> frozenset[str]:
        if self._words is None:
            self._words = significant_words(self.text)
        return self._words

    @property
    def trigrams(self) -> frozenset[tuple[str, str, str]]:
        if self._trigrams is None:
            w = words(self.text)
            self._trigrams = frozenset(zip(w, w[1:], w[2:], strict=False))
        return self._trigrams

    @property
    def digest(self) -> str:
        """32 hex digits (BLAKE2b-128) of the normalized key: the same content, the same digest, in
        every run (what a store keys a message's content by)."""
        if self._digest is None:
            raw = json.dumps(self.key, ensure_ascii=False, separators=(",", ":")).encode()
            self._digest = hashlib.blake2b(raw, digest_size=16).hexdigest()
        return self._digest


class FormTable:
    """Interns forms: `form_of(message)` gives the one `Form` of its normalized content.
    `count_text` counts tokens of a text (called once per distinct form)."""

    def __init__(self, count_text: Callable[[str], int]) -> None:
        self._count = count_text
        self._forms: dict[tuple[str, ...], Form] = {}
        # A one-part message by its role and raw text: every call repeats the conversation, so
        # most messages are seen again as the very same text, and a lookup skips normalizing it.
        self._raw: dict[tuple[str, str, str], Form] = {}
        self._raw_multi: dict[tuple[str, ...], Form] = {}

    def __len__(self) -> int:
        return len(self._forms)

    def form_of(self, message: Message) -> Form:
        parts = message.parts
        if len(parts) == 1:
            p = parts[0]
            kind = p.get("type")
            value = (
                p.get("content")
                if kind == "text"
                else p.get("result")
                if kind == "tool_call_response"
                else None
            )
            if value.__class__ is str:
                raw = (message.role, kind, value)
                form = self._raw.get(raw)  # type: ignore[arg-type]
                if form is None:
                    form = self._raw[raw] = self.form_of_parts(message.role, parts)  # type: ignore[index]
                return form
        raw_key = (message.role, *map(_raw_part, parts))
        form = self._raw_multi.get(raw_key)
        if form is None:
            form = self._raw_multi[raw_key] = self.form_of_parts(message.role, parts)
        return form

    def form_of_parts(self, role: str, parts: Sequence[Mapping[str, Any]]) -> Form:
        key, role_class, kind = _key(role, parts)
        form = self._forms.get(key)
        if form is None:
            text = _flat_text(parts)
            form = self._forms[key] = Form(key, role_class, kind, text, self._count(text) + 3)
        return form


def _raw_part(p: Mapping[str, Any]) -> str:
    """A part as a text that differs whenever its form could (ids left out): a cache key, cheaper than
    normalizing."""
    kind = p.get("type")
    if kind == "text":
        return "t" + _raw_value(p.get("content"))
    if kind == "tool_call":
        return f"c{p.get('name')!r}{_raw_value(p.get('arguments'))}"
    if kind == "tool_call_response":
        return "r" + _raw_value(p.get("result"))
    return "o" + repr({k: v for k, v in p.items() if k != "id"})


def _raw_value(value: Any) -> str:
    return "s" + value if isinstance(value, str) else "v" + repr(value)


def _key(role: str, parts: Sequence[Mapping[str, Any]]) -> tuple[tuple[str, ...], str, str]:
    """(key, role class, kind) of a message: see the module docstring."""
    texts: list[str] = []
    units: list[str] = []
    calls = results = others = 0
    for p in parts:
        t = p.get("type")
        if t == "text":
            texts.append(str(p.get("content") or ""))
        elif t == "tool_call":
            calls += 1
            units.append("c:" + str(p.get("name") or "") + ":" + _canonical(p.get("arguments")))
        elif t == "tool_call_response":
            results += 1
            units.append("r:" + _canonical(p.get("result")))
        else:
            others += 1
            units.append("o:" + _canonical({k: v for k, v in p.items() if k != "id"}))
    role_class = role
    if role == "tool" or (results and not texts and not calls and not others):
        role_class = "tool"
        # The text of a tool message is its result (the Chat Completions form of a tool result).
        units = ["r:" + _canonical("\n".join(texts))] + units if texts else units
        texts = []
    text_key = "".join("".join(texts).split()) if texts else ""
    key = (role_class, "t:" + text_key, *units) if text_key else (role_class, *units)
    if role_class == "tool":
        kind = "tool_result"
    elif calls:
        kind = "tool_call"
    elif text_key or others:
        kind = "text"
    else:
        kind = "empty"
    return key, role_class, kind


def _canonical(value: Any) -> str:
    """A value as canonical JSON with no whitespace; a text that is JSON is read first, so a JSON text
    and its decoded value are the same, and other text loses only its whitespace."""
    if isinstance(value, str):
        s = value.strip()
        if s[:1] in ("{", "[") and s[-1:] in ("}", "]"):
            try:
                value = json.loads(s)
            except ValueError:
                return "".join(value.split())
        else:
            return "".join(value.split())
    try:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    except ValueError:  # a circular structure: not from JSON, but do not fail on it
        text = repr(value)
    return "".join(text.split())


def _flat_text(parts: Sequence[Mapping[str, Any]]) -> str:
    """A readable flat text of a message: texts, tool calls as `name(arguments)`, results, other parts
    as JSON; one per line."""
    out: list[str] = []
    for p in parts:
        t = p.get("type")
        if t == "text":
            out.append(str(p.get("content") or ""))
        elif t == "tool_call":
            args = p.get("arguments")
            args_text = args if isinstance(args, str) else _dumps(args)
            out.append(f"{p.get('name') or ''}({args_text})")
        elif t == "tool_call_response":
            result = p.get("result")
            out.append(result if isinstance(result, str) else _dumps(result))
        else:
            out.append(_dumps({k: v for k, v in p.items() if k != "id"}))
    return "\n".join(out)


def _dumps(value: Any) -> str:
    if value is None:
        return ""
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:
        return repr(value)
