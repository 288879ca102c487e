"""Reading an OTLP/HTTP `ExportTraceServiceRequest` body, protobuf or JSON, into plain spans.

What refuses the whole request (`OtlpDecodeError`, HTTP 400) and what refuses one span:

- the whole request: a content type or encoding we do not read (415), a body past the size limit once
  gunzipped (413), a body that is not protobuf / not JSON at all, or whose envelope (the lists of
  resource spans, scope spans and spans) is not of the OTLP shape (400);
- one span, the others kept: missing or invalid ids, invalid UTF-8 / a lone surrogate / a NUL in any
  of its strings, a value past the size limit, too many attributes / events / links, values nested
  too deep, a start or end time of 0 or past the year 9999, a field of the wrong type (JSON), and —
  protobuf — bytes that do not parse on their own. A resource that cannot be read refuses its spans.

The readers: `_decode_protobuf` (parsed in one call, split at the wire level only when that fails)
and `_decode_json` (the OTLP/JSON rules); the limits and value checks they share, in
`_decode_checks`.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from ..errors import OtlpBodyTooLargeError, OtlpContentTypeError, OtlpDecodeError
from ._decode_json import JsonReader
from ._decode_protobuf import ProtobufReader, protobuf_classes
from ._types import DecodedRequest, DecodeLimits

__all__ = ["decode_request", "encode_response"]

_DEFAULT_LIMITS = DecodeLimits()
_PROTOBUF_TYPES = ("application/x-protobuf", "application/protobuf")


def decode_request(
    body: bytes,
    content_type: str,
    *,
    content_encoding: str | None = None,
    limits: DecodeLimits | None = None,
) -> DecodedRequest:
    """Read an OTLP/HTTP traces request body.

        decoded = decode_request(request.body, request.content_type,
                                 content_encoding=request.headers.get("Content-Encoding"))
        decoded.spans          # [Span, ...] in request order
        decoded.rejections     # [SpanRejection, ...]: OTLP's partial_success.rejected_spans

    `content_type` is `application/x-protobuf` (or `application/protobuf`) or `application/json`,
    parameters ignored; `content_encoding` `gzip` or `identity`/None. Raises `OtlpDecodeError` (or
    its subclasses `OtlpContentTypeError`, `OtlpBodyTooLargeError`) when the request cannot be read
    as a whole, `OtlpDependencyError` for a protobuf body without the `otlp` extra installed, and
    nothing else, whatever the body holds."""
    limits = limits or _DEFAULT_LIMITS
    media = content_type.split(";", 1)[0].strip().lower()
    if media in _PROTOBUF_TYPES:
        is_json = False
    elif media == "application/json":
        is_json = True
    else:
        raise OtlpContentTypeError(
            f"content type {content_type!r} is not read here: send application/x-protobuf or application/json"
        )
    body = _inflate(bytes(body), content_encoding, limits.max_body_bytes)
    if len(body) > limits.max_body_bytes:
        raise OtlpBodyTooLargeError(
            f"the body is {len(body)} bytes, more than the limit of {limits.max_body_bytes} bytes"
        )
    reader = JsonReader(limits) if is_json else ProtobufReader(limits)
    reader.read(body)
    return DecodedRequest(spans=reader.spans, rejections=reader.rejections)


def encode_response(decoded: DecodedRequest, content_type: str) -> bytes:
    """The `ExportTraceServiceResponse` body answering `decoded`, in the request's encoding: empty
    `partial_success` when every span was taken, else `rejected_spans` and `error_message`. (JSON
    needs no extra package; protobuf needs the `otlp` extra.)"""
    media = content_type.split(";", 1)[0].strip().lower()
    if media in _PROTOBUF_TYPES:
        pb = protobuf_classes()
        response = pb.Response()
        if decoded.rejections:
            response.partial_success.rejected_spans = decoded.rejected_spans
            response.partial_success.error_message = decoded.error_message
        out: bytes = response.SerializeToString()
        return out
    partial: dict[str, Any] = {}
    if decoded.rejections:
        # int64 as a decimal string, as the proto3 JSON mapping writes it.
        partial = {"rejectedSpans": str(decoded.rejected_spans), "errorMessage": decoded.error_message}
    return json.dumps({"partialSuccess": partial}, ensure_ascii=False).encode()


def _inflate(body: bytes, encoding: str | None, limit: int) -> bytes:
    enc = (encoding or "identity").strip().lower()
    if enc == "identity" or enc == "":
        return body
    if enc != "gzip":
        raise OtlpContentTypeError(f"content encoding {encoding!r} is not read here: send gzip or none")
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise OtlpDecodeError(f"the body is not valid gzip: {exc}") from None
    if len(out) > limit:
        raise OtlpBodyTooLargeError(f"the body inflates to more than the limit of {limit} bytes")
    if not inflater.eof:
        raise OtlpDecodeError("the gzip body is truncated")
    return out
