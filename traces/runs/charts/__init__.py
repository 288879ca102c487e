"""The run page's two SVG charts, measured and laid out here so templates only draw: the fidelity
map (messages × steps, one rectangle per run of equal outcomes) and the pin lanes (each pin's
lifetime, with its expiry, unpin and refused calls). Each builder reads what it draws in a few
queries; the run page and the compare view call them from here.

Modules: `fidelity` (`fidelity_map`), `pins` (`pin_chart`).
"""

from __future__ import annotations

from traces.runs.charts.fidelity import (
    LEGEND,
    MAP_WINDOW,
    FidelityMap,
    MapCell,
    MapRow,
    MapTick,
    fidelity_map,
    outcome_class,
    outcome_label,
)
from traces.runs.charts.pins import PinChart, PinLane, PinMarker, pin_chart, pinned_tokens_per_turn

__all__ = [
    "LEGEND",
    "MAP_WINDOW",
    "FidelityMap",
    "MapCell",
    "MapRow",
    "MapTick",
    "PinChart",
    "PinLane",
    "PinMarker",
    "fidelity_map",
    "outcome_class",
    "outcome_label",
    "pin_chart",
    "pinned_tokens_per_turn",
]
