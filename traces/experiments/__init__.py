"""Datasets and experiments (issue 38).

Modules: `datasets` (checking items, writing versions, items from a run's turn, uploads with bad rows
reported by line), `service` (checking, starting and cancelling experiments; the sweeper; an item's
conversation), `worker` (claiming and running items on Celery workers, judging them), `results`
(per-item and overall figures, comparing two experiments), `serializers`, `api` (`/api/v1/datasets…`,
`/api/v1/experiments…`), `views` (the datasets list, a dataset, an experiment, two compared, "Add to
dataset" on the turn page). The models are `traces.models.Dataset`, `DatasetVersion`, `DatasetItem`,
`Experiment` and `ExperimentItem`.

Permissions (`traces/core/access.py`): viewers read; members (`Action.UPLOAD`) make datasets and
items, and (`Action.CONVERSE`) start and cancel experiments, as they start conversations.
"""
