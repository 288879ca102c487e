"""Stages 5 and 6, count and answer: the fate of every item of a batch, in input order, and the totals.

`answer` takes what validation rejected (stage 2) and what storing marked `accepted` or `duplicate`
(stage 3) and gives the `IngestResult` every source reads (`IngestResult.to_dict` is the API's body).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from traces.ingest.validation import CheckedEvent, EventResult, Status


@dataclass
class IngestResult:
    """Counts and per-item results of one `ingest_events` call, and the run ids it touched."""

    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    results: list[EventResult] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The API's answer. With rejections it also carries the one error shape (`error`, `detail`)."""
        out: dict[str, Any] = {
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "rejected": self.rejected,
            "results": [r.to_dict() for r in self.results],
        }
        if self.rejected:
            n = len(self.results)
            rest = "nothing was stored" if self.rejected == n else "the others were stored"
            out["error"] = f"{self.rejected} of {n} event{'s' if n != 1 else ''} rejected; {rest}"
            out["detail"] = [r.detail() for r in self.results if r.status == "rejected"]
        return out


def answer(
    n_items: int, checked: list[CheckedEvent], statuses: dict[int, Status], rejected: dict[int, EventResult]
) -> IngestResult:
    """The result of a batch of `n_items` items: each one's `EventResult` in input order, counted.

    `rejected`: the results of the items refused (by validation, or when storing one failed), by
    index; `statuses`: the fate of the others that were stored or found stored already (a checked
    item with neither is impossible). Runs: those of the checked items that were written or found."""
    by_index = dict(rejected)
    for c in checked:
        if c.index not in by_index:
            by_index[c.index] = EventResult(c.index, statuses[c.index])
    result = IngestResult()
    result.results = [by_index[i] for i in range(n_items)]
    for r in result.results:  # 5. count
        if r.status == "accepted":
            result.accepted += 1
        elif r.status == "duplicate":
            result.duplicates += 1
        else:
            result.rejected += 1
    result.runs = sorted({c.event.run_id for c in checked if c.index in statuses})
    return result
