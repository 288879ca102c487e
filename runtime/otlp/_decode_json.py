"""The OTLP/JSON reader, by the OTLP/JSON rules: ids as hex, 64-bit integers as strings or numbers,
enums as integers (their names are read too), lowerCamelCase or snake_case keys."""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any, NoReturn

from ..errors import OtlpDecodeError
from ._decode_checks import KINDS, MAX_TIME_NS, STATUS, Reject, SpanReader, b64, float_value
from ._types import Event, Link, Scope

_KIND_NAMES = {f"SPAN_KIND_{k.upper()}": i for i, k in enumerate(KINDS)}
_STATUS_NAMES = {f"STATUS_CODE_{k.upper()}": i for i, k in enumerate(STATUS)}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# A JSON escape of a UTF-16 surrogate (\uD800-\uDFFF); only bodies holding one need the per-string
# surrogate check (a false positive such as an escaped backslash followed by "ud800" only costs time).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abAB89a-fA-F]")


class JsonReader(SpanReader):
    """Decodes one OTLP/JSON request; collects spans and rejections."""

    def read(self, body: bytes) -> None:
        try:
            text = body.decode("utf-8")
            self.check_surrogates = "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None
        except UnicodeDecodeError:
            # Invalid bytes become lone surrogates: the spans holding them are refused one by one.
            text = body.decode("utf-8", "surrogateescape")
            self.check_surrogates = True
        doc = _json_loads(text)
        if not isinstance(doc, dict):
            _bad_json("the body is JSON but not an object")
        rss = _get(doc, "resourceSpans", "resource_spans")
        for rs in _json_list(rss, "resourceSpans"):
            if not isinstance(rs, dict):
                _bad_json("an item of resourceSpans is not an object")
            sss = list(_json_list(_get(rs, "scopeSpans", "scope_spans"), "resourceSpans[].scopeSpans"))
            for ss in sss:
                if not isinstance(ss, dict):
                    _bad_json("an item of scopeSpans is not an object")
                _json_list(ss.get("spans"), "scopeSpans[].spans")
            resource_error: Reject | None = None
            resource: dict[str, Any] = {}
            try:
                res = rs.get("resource")
                if res is not None:
                    if not isinstance(res, dict):
                        raise Reject("invalid_value", "is not an object")
                    resource = self.attrs(res.get("attributes"), 0)
            except Reject as r:
                resource_error = r.within("resource")
            for ss in sss:
                spans = ss.get("spans") or []
                scope_error = resource_error
                scope_out: Scope = {"name": "", "version": ""}
                if scope_error is None:
                    try:
                        scope = ss.get("scope") or {}
                        if not isinstance(scope, dict):
                            raise Reject("invalid_value", "is not an object")
                        scope_out = {
                            "name": self.string(scope.get("name")),
                            "version": self.string(scope.get("version")),
                        }
                    except Reject as r:
                        scope_error = r.within("scope")
                for sp in spans:
                    if scope_error is not None:
                        self.reject(scope_error, *_json_ids(sp))
                    else:
                        self.span(sp, resource, scope_out)

    def string(self, value: Any) -> str:
        if value is None:
            return ""
        if type(value) is not str:
            raise Reject("invalid_value", "is not a string")
        return self.text(value)

    def span(self, sp: Any, resource: dict[str, Any], scope: Scope) -> None:
        try:
            if not isinstance(sp, dict):
                raise Reject("invalid_value", "the span is not an object")
            tid = _hex_id(_get(sp, "traceId", "trace_id"), 16, "trace_id")
            sid = _hex_id(_get(sp, "spanId", "span_id"), 8, "span_id")
            pid_value = _get(sp, "parentSpanId", "parent_span_id")
            pid = _hex_id(pid_value, 8, "parent_span_id") if pid_value else None
            start = _json_uint(_get(sp, "startTimeUnixNano", "start_time_unix_nano"), "start_time_unix_nano")
            end = _json_uint(_get(sp, "endTimeUnixNano", "end_time_unix_nano"), "end_time_unix_nano")
            self.timestamps(start, end)
            try:
                name = self.string(sp.get("name"))
            except Reject as r:
                raise r.within("name") from None
            kind = _json_enum(sp.get("kind"), _KIND_NAMES, "kind")
            attributes = self.attrs(sp.get("attributes"), 0)
            raw_events = sp.get("events")
            events = self.events(raw_events) if raw_events else []
            raw_links = sp.get("links")
            links = self.links(raw_links) if raw_links else []
            status = sp.get("status") or {}
            if not isinstance(status, dict):
                raise Reject("invalid_value", "is not an object", "status")
            code = _json_enum(status.get("code"), _STATUS_NAMES, "status.code")
            try:
                message = self.string(status.get("message"))
            except Reject as r:
                raise r.within("status.message") from None
        except Reject as r:
            self.reject(r, *_json_ids(sp))
            return
        self.accept(
            (tid, sid, pid),
            name,
            kind,
            (start, end),
            (code, message),
            (attributes, events, links, resource, scope),
        )

    def events(self, raw_events: Any) -> list[Event]:
        if not isinstance(raw_events, list):
            raise Reject("invalid_value", "is not a list", "events")
        self.count(len(raw_events), self.max_events, "events")
        events: list[Event] = []
        for i, ev in enumerate(raw_events):
            try:
                if not isinstance(ev, dict):
                    raise Reject("invalid_value", "is not an object")
                t = _json_uint(_get(ev, "timeUnixNano", "time_unix_nano"), "time_unix_nano")
                if t > MAX_TIME_NS:
                    raise Reject("invalid_timestamp", "is past the year 9999", "time_unix_nano")
                events.append(
                    {
                        "name": self.string(ev.get("name")),
                        "time": t or None,
                        "attributes": self.attrs(ev.get("attributes"), 0),
                    }
                )
            except Reject as r:
                raise r.within(f"events[{i}]") from None
        return events

    def links(self, raw_links: Any) -> list[Link]:
        if not isinstance(raw_links, list):
            raise Reject("invalid_value", "is not a list", "links")
        self.count(len(raw_links), self.max_links, "links")
        links: list[Link] = []
        for i, ln in enumerate(raw_links):
            try:
                if not isinstance(ln, dict):
                    raise Reject("invalid_value", "is not an object")
                links.append(
                    {
                        "trace_id": _hex_id(_get(ln, "traceId", "trace_id"), 16, "trace_id"),
                        "span_id": _hex_id(_get(ln, "spanId", "span_id"), 8, "span_id"),
                        "attributes": self.attrs(ln.get("attributes"), 0),
                    }
                )
            except Reject as r:
                raise r.within(f"links[{i}]") from None
        return links

    def attrs(self, kvs: Any, depth: int) -> dict[str, Any]:
        if kvs is None:
            return {}
        if not isinstance(kvs, list):
            raise Reject("invalid_value", "attributes are not a list")
        if len(kvs) > self.max_attributes:
            raise Reject(
                "too_many_items", f"has {len(kvs)} attributes, past the limit of {self.max_attributes}"
            )
        out: dict[str, Any] = {}
        for i, kv in enumerate(kvs):
            if not isinstance(kv, dict) or type(kv.get("key")) is not str:
                raise Reject("invalid_value", f"attribute {i} is not an object with a string key")
            key: str = kv["key"]
            try:
                self.text(key)
                out[key] = self.value(kv.get("value"), depth)
            except Reject as r:
                raise r.within(key if depth else f"attributes[{key!r}]") from None
        return out

    def value(self, v: Any, depth: int) -> Any:
        if v is None:
            return None
        if not isinstance(v, dict):
            raise Reject("invalid_value", "is not an AnyValue object")
        for key, x in v.items():
            which = _ANY_KEYS.get(key)
            if which is None:
                continue
            if which == "string":
                if type(x) is not str:
                    raise Reject("invalid_value", "stringValue is not a string")
                return self.text(x)
            if which == "bool":
                if type(x) is not bool:
                    raise Reject("invalid_value", "boolValue is not a boolean")
                return x
            if which == "int":
                return _json_int(x)
            if which == "double":
                return _json_double(x)
            if which == "array" or which == "kvlist":
                if depth >= self.max_depth:
                    raise Reject("nesting_too_deep", f"nests arrays / kvlists deeper than {self.max_depth}")
                if not isinstance(x, dict):
                    raise Reject("invalid_value", f"{key} is not an object")
                values = x.get("values")
                if which == "kvlist":
                    return self.attrs(values, depth + 1)
                if values is None:
                    return []
                if not isinstance(values, list):
                    raise Reject("invalid_value", "arrayValue.values is not a list")
                self.count(len(values), self.max_attributes, "array items")
                return [self.value(item, depth + 1) for item in values]
            # bytes: base64 in OTLP/JSON (standard or URL-safe alphabet, as the proto3 mapping reads)
            if type(x) is not str:
                raise Reject("invalid_value", "bytesValue is not a base64 string")
            if len(x) > self.max_chars * 4 // 3 + 4:
                raise Reject("value_too_large", f"is {len(x)} base64 characters, past the limit")
            try:
                raw = base64.b64decode(x.replace("-", "+").replace("_", "/"), validate=True)
            except (binascii.Error, ValueError):
                raise Reject("invalid_value", "bytesValue is not valid base64") from None
            if len(raw) > self.max_chars:
                raise Reject(
                    "value_too_large", f"is {len(raw)} bytes long, past the limit of {self.max_chars}"
                )
            return b64(raw)
        return None


_ANY_KEYS = {
    "stringValue": "string",
    "string_value": "string",
    "boolValue": "bool",
    "bool_value": "bool",
    "intValue": "int",
    "int_value": "int",
    "doubleValue": "double",
    "double_value": "double",
    "arrayValue": "array",
    "array_value": "array",
    "kvlistValue": "kvlist",
    "kvlist_value": "kvlist",
    "bytesValue": "bytes",
    "bytes_value": "bytes",
}


class _HugeInt:
    """An integer literal too long to be a 64-bit value (json.loads refuses to read very long ones)."""

    def __init__(self, digits: str) -> None:
        self.digits = digits


def _lenient_int(digits: str) -> int | _HugeInt:
    return int(digits) if len(digits) <= 24 else _HugeInt(digits)


def _json_loads(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        _bad_json("the JSON nests too deeply to be read")
    except ValueError as exc:
        if "digits" not in str(exc):
            _bad_json(f"the body is not JSON: {exc}")
    # An integer of thousands of digits: read again, keeping such integers aside (their spans are refused).
    try:
        return json.loads(text, parse_int=_lenient_int)
    except RecursionError:
        _bad_json("the JSON nests too deeply to be read")
    except ValueError as exc:
        _bad_json(f"the body is not JSON: {exc}")


def _bad_json(message: str) -> NoReturn:
    raise OtlpDecodeError(message)


def _get(d: dict[str, Any], camel: str, snake: str) -> Any:
    value = d.get(camel)
    return d.get(snake) if value is None else value


def _json_list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        _bad_json(f"{what} is not a list")
    return value


def _hex_id(value: Any, size: int, field: str) -> str:
    if type(value) is not str or len(value) != size * 2:
        raise Reject(
            "invalid_id",
            f"must be {size * 2} hex digits (OTLP/JSON writes ids as hex, not base64)"
            if value
            else "is missing",
            field,
        )
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise Reject("invalid_id", f"must be {size * 2} hex digits", field) from None
    if len(raw) != size:
        raise Reject("invalid_id", f"must be {size * 2} hex digits", field)
    if raw == bytes(size):
        raise Reject("invalid_id", "is all zeros", field)
    return raw.hex()


def _json_uint(value: Any, field: str) -> int:
    """A fixed64 as OTLP/JSON writes it: a decimal string or a number; absent is 0."""
    if value is None:
        return 0
    if type(value) is int:
        n = value
    elif type(value) is str and 0 < len(value) <= 24 and value.isascii() and value.isdigit():
        n = int(value)
    elif type(value) is float and value.is_integer() and 0 <= value < 2**64:
        n = int(value)
    else:
        raise Reject("invalid_value", "is not an unsigned integer (a decimal string or a number)", field)
    if n < 0 or n >= 2**64:
        raise Reject("invalid_timestamp", "is out of the 64-bit range", field)
    return n


def _json_int(value: Any) -> int:
    if type(value) is int:
        n = value
    elif type(value) is str:
        s = value[1:] if value[:1] == "-" else value
        if not (0 < len(s) <= 20 and s.isascii() and s.isdigit()):
            raise Reject("invalid_value", "intValue is not a decimal integer")
        n = int(value)
    elif type(value) is float and value.is_integer():
        n = int(value)
    else:
        raise Reject("invalid_value", "intValue is not an integer")
    if not _INT64_MIN <= n <= _INT64_MAX:
        raise Reject("invalid_value", "intValue is out of the 64-bit range")
    return n


_SPECIAL_DOUBLES = {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity"}


def _json_double(value: Any) -> float | str:
    if type(value) is float:
        return float_value(value)
    if type(value) is int:
        return (
            float_value(float(value)) if abs(value) < 2**1023 else ("Infinity" if value > 0 else "-Infinity")
        )
    if type(value) is str:
        special = _SPECIAL_DOUBLES.get(value)
        if special is not None:
            return special
        if len(value) <= 64:
            try:
                return float_value(float(value))
            except ValueError:
                pass
    raise Reject("invalid_value", "doubleValue is not a number")


def _json_enum(value: Any, names: dict[str, int], field: str) -> int:
    if value is None:
        return 0
    if type(value) is int:
        return value
    if type(value) is str and value in names:
        return names[value]
    raise Reject("invalid_value", "is not an enum value (an integer)", field)


def _json_ids(sp: Any) -> tuple[str | None, str | None]:
    if not isinstance(sp, dict):
        return None, None
    out: list[str | None] = []
    for camel, snake, size in (("traceId", "trace_id", 16), ("spanId", "span_id", 8)):
        try:
            out.append(_hex_id(_get(sp, camel, snake), size, camel))
        except Reject:
            out.append(None)
    return out[0], out[1]
