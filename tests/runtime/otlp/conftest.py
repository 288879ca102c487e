"""A loopback OTLP/HTTP collector and an OpenTelemetry SDK tracer provider exporting to it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from runtime.otlp import NormalizedSpan, decode_request, normalize_span
from tests.runtime.openai_server import RecordedRequest, _Exchange, _LoopbackServer


class OtlpCollector(_LoopbackServer):
    """Records every `POST /v1/traces` and answers an empty ExportTraceServiceResponse."""

    def respond(self, req: RecordedRequest, exchange: _Exchange) -> None:
        exchange.send(200, b"", content_type="application/x-protobuf")

    def __enter__(self) -> OtlpCollector:
        self.start()
        return self

    def normalized(self) -> list[NormalizedSpan]:
        """Every span received so far, decoded (none refused) and normalized."""
        out: list[NormalizedSpan] = []
        for req in list(self.requests):
            decoded = decode_request(
                req.body, req.headers["content-type"], content_encoding=req.headers.get("content-encoding")
            )
            assert decoded.rejections == []
            out.extend(normalize_span(s) for s in decoded.spans)
        return out


@pytest.fixture
def collector() -> Iterator[OtlpCollector]:
    with OtlpCollector() as server:
        yield server


@pytest.fixture
def tracer_provider(collector: OtlpCollector) -> Iterator[TracerProvider]:
    """The SDK exporting each span as it ends, as protobuf over HTTP, to the collector."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": "otlp-test", "deployment.environment": "test"})
    )
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{collector.origin}/v1/traces"))
    )
    yield provider
    provider.shutdown()
