"""Trace files of our runtime for the situations of the real arcana-agent 1.2.0 fixtures in
`tests/fixtures/arcana-1.2-unseen/`, written through a real loopback HTTP provider, so every view can
be checked to give the same answer on both producers' files.

    ours = write_tools_and_errors(tmp_path)   # {"run_id": …, "path": …}
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from runtime import OpenAICompatibleProvider, Runtime, RuntimeConfig
from runtime.errors import ProviderError
from tests.runtime.openai_server import OpenAIServer

ROOT = Path(__file__).resolve().parents[2]
UNSEEN = ROOT / "tests" / "fixtures" / "arcana-1.2-unseen"
#: arcana-agent 1.2.0 files (see that folder's scenario.json).
ARCANA_TOOLS_SEND = "12f6ae8b-6515-425d-b7ba-2270839752a5"  # a tool raised, an unknown tool, then an answer
ARCANA_PLAIN_SEND = "e2364baf-09e2-4997-befe-be9ef64871e0"
ARCANA_500_SEND = "260a7ec8-1dfd-4d0a-8a67-618ef2488609"  # the provider answered 500: no model answer
ARCANA_PLANNER = (
    "8b6e30a8-cf73-42a4-9961-93ccb926b53b"  # pins in iteration 0; the pin is rendered in iteration 1
)
ARCANA_WRITER = "8a440ecb-a131-41e3-8d17-430accbc2804"  # delegated by the planner's run
ARCANA_BUNDLE = "bundle-fixture0000pool"
ARCANA_POOL_RUNS = [  # in start order
    "8b6e30a8-cf73-42a4-9961-93ccb926b53b",
    "9fd4e8a1-e82c-40e7-ae04-fc9c0ac88220",
    "d80f7c9c-be67-4423-9a73-7906fa43049d",
    "8a440ecb-a131-41e3-8d17-430accbc2804",
    "22af80d7-4fc7-46f1-895f-d41b77e1621c",
    "5d2c2300-6291-4059-9187-7146b9029d6f",
]


def lookup_price(sku: str) -> str:
    """Look up the price of a product by its SKU."""
    if sku.startswith("X"):
        raise ValueError(f"price service has no SKU {sku}")
    return f"{sku}: 12.50 EUR"


async def _tools_and_errors(trace_dir: Path) -> dict[str, Any]:
    with OpenAIServer() as server:
        provider = OpenAICompatibleProvider(
            "loop", base_url=server.base_url, model="loopback-model", max_retries=1
        )
        rt = Runtime(
            providers={"loop": provider}, config=RuntimeConfig(trace_dir=str(trace_dir)), tools=[lookup_price]
        )
        error = None
        async with rt.chat(system="You answer price questions.") as chat:
            server.enqueue_tool_calls([("lookup_price", {"sku": "X-404"}), ("get_stock", {"sku": "X-404"})])
            server.enqueue_text("I could not get the price or the stock of X-404.")
            await chat.send("What do X-404 cost, and are they in stock?")
            server.enqueue_error(500, message="upstream model is overloaded")
            server.enqueue_error(500, message="upstream model is overloaded")
            try:
                await chat.send("And the price of A-1?")
            except ProviderError as exc:
                error = str(exc)
            run_id = chat.run_id
        await provider.aclose()
    return {"run_id": run_id, "path": trace_dir / f"{run_id}.jsonl", "error": error}


def write_tools_and_errors(trace_dir: Path) -> dict[str, Any]:
    """One chat of ours (one run): turn 1 calls `lookup_price` (raises) and `get_stock` (unknown) then
    answers; turn 2 fails: the provider answers HTTP 500 to both tries. Returns run_id, path, error."""
    return asyncio.run(_tools_and_errors(trace_dir))
