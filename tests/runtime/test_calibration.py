"""Presets arcana-agent 1.2 users name, and token counts calibrated for models tiktoken does not know."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runtime import PRESETS, CalibratedCounter, OpenAICompatibleProvider, Runtime, RuntimeConfig, TokenCounter
from runtime._providers import resolve_providers
from runtime._tokens import tiktoken_knows
from runtime.errors import ConfigError
from tests.runtime.openai_server import OpenAIServer


def test_it_offers_the_presets_arcana_users_name(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = {
        "openai": ("https://api.openai.com/v1", "gpt-4o-mini"),
        "deepseek": ("https://api.deepseek.com/v1", "deepseek-chat"),
        "gemini": ("https://generativelanguage.googleapis.com/v1beta/openai", "gemini-2.0-flash"),
        "kimi": ("https://api.moonshot.cn/v1", "moonshot-v1-8k"),
        "glm": ("https://open.bigmodel.cn/api/paas/v4", "glm-4-flash"),
        "minimax": ("https://api.minimax.chat/v1", "abab6.5s-chat"),
        "ollama": ("http://localhost:11434/v1", "llama3.2"),
    }
    assert {name: (p.base_url, p.model) for name, p in PRESETS.items()} == expected
    for name, preset in PRESETS.items():
        monkeypatch.setenv(preset.api_key_env, f"key-of-{name}")
    providers = resolve_providers({name: {} for name in PRESETS})
    for name, (url, model) in expected.items():
        p = providers[name]
        assert isinstance(p, OpenAICompatibleProvider)
        assert (p.base_url, p.model) == (url, model)
        assert p._headers["Authorization"] == f"Bearer key-of-{name}"


def test_ollama_needs_no_key_and_the_others_say_which_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(resolve_providers({"ollama": {}})["ollama"], OpenAICompatibleProvider)
    with pytest.raises(ConfigError, match="GEMINI_API_KEY"):
        resolve_providers({"gemini": {}})


def test_it_knows_which_models_tiktoken_has() -> None:
    assert tiktoken_knows("gpt-4o-mini") and tiktoken_knows("gpt-4")
    assert not any(
        tiktoken_knows(m) for m in ("deepseek-chat", "gemini-2.0-flash", "glm-4-flash", "llama3.2", None)
    )


def test_a_calibrated_counter_scales_counts_by_the_reported_ratio() -> None:
    base = TokenCounter()
    c = CalibratedCounter(base)
    text = "The quick brown fox jumps over the lazy dog. " * 20
    assert c.count_text(text) == base.count_text(text) and c.ratio == 1.0

    c.observe(counted=200, reported=300)
    c.observe(counted=200, reported=260)

    assert c.ratio == pytest.approx(1.4)
    assert c.count_text(text) == -(-base.count_text(text) * 14 // 10)  # ceil(n * 1.4)
    assert c.count_message({"role": "user", "content": text}) >= base.count_message(
        {"role": "user", "content": text}
    )
    assert base.count_text(c.truncate_text(text, 70)) <= 50
    restored = CalibratedCounter(base)
    restored.restore(c.to_dict())
    assert restored.ratio == c.ratio and restored.describe() == {
        "estimated": True,
        "ratio": 1.4,
        "observations": 2,
    }
    c.observe(counted=100, reported=100_000)  # nonsense is clamped
    assert c.ratio <= CalibratedCounter.MAX_RATIO


def _events(sink: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in sink if e["event_type"] == kind]


@pytest.mark.parametrize(("model", "estimated"), [("deepseek-chat", True), ("gpt-4o-mini", False)])
def test_a_session_calibrates_against_reported_usage_and_marks_estimates(
    openai_server: OpenAIServer, model: str, estimated: bool
) -> None:
    from runtime import CallableSink

    events: list[dict[str, Any]] = []
    openai_server.enqueue_text(
        "first", usage={"prompt_tokens": 500, "completion_tokens": 1, "total_tokens": 501}
    )
    openai_server.enqueue_text(
        "second", usage={"prompt_tokens": 900, "completion_tokens": 1, "total_tokens": 901}
    )
    rt = Runtime(
        {"llm": {"base_url": openai_server.base_url, "model": model}},
        config=RuntimeConfig(trace_dir=None, context_window=8000),
        trace_sinks=[CallableSink(events.append)],
    )

    async def run() -> dict[str, Any]:
        async with rt.chat(system="Be brief.") as chat:
            await chat.send("Hello there, how are you today?")
            await chat.send("And tomorrow?")
            state = chat.export_state()
        await rt.aclose()
        return state

    state = asyncio.run(run())

    decisions = _events(events, "context_decision")
    calls = _events(events, "llm_call")
    if not estimated:
        assert all("token_counts" not in d["metadata"]["context_report"] for d in decisions)
        assert all("token_counts" not in c["metadata"] for c in calls) and state["token_calibration"] is None
        return
    first, second = (d["metadata"]["context_report"]["token_counts"] for d in decisions)
    assert first == {"estimated": True, "ratio": 1.0, "observations": 0}
    assert second["observations"] == 1 and second["ratio"] > 1.0  # 500 reported for a short prompt
    assert calls[1]["metadata"]["token_counts"]["estimated"] is True
    assert state["token_calibration"]["reported"] == 1400
