"""OpenTelemetry traces from any agent framework: the OTLP/HTTP endpoint (`api`). Decoding and the
conventions are `runtime.otlp`; storing spans and deriving runs is the one writer's
(`traces.ingest.spans`)."""
