"""The project dashboard, cost and sessions (issue 37).

- `prices`: a project's price table (`runtime.pricing`'s defaults, the project's own prices over
  them) and the cost of steps, turns and runs read from their rows;
- `histograms`, `rollups`: the per-day rollups the dashboard reads (kept by ingestion's marks and the
  `refresh_rollups` beat task; DESIGN.md §10);
- `figures`: the dashboard's numbers for a range and filters, from the rollups only;
- `charts`: server-drawn SVG bar charts with a data table behind each;
- `sessions`: runs grouped by session, and one session's transcript;
- `views`, `api`, `serializers`, `filters`, `actions` (setting a project's prices, audit-logged).
"""
