"""Arcana Console's agent runtime: providers, working-set builder, sessions, pools, cognitive
primitives and traces. Pure Python: nothing here imports Django, DRF, Celery or `traces`."""

from __future__ import annotations
