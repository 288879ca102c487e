"""Re-running a step from an edited context (issue 38): `actions` (`step_context_of`, `check_rerun`,
`do_rerun_step`), `worker` (the task's body: the re-run on a worker, its branch run stored through
`traces.ingest`), `forms` (the turn page's form), `views` (the form's post, the branch status page),
`api` (`POST …/steps/<n>/rerun`, `GET …/branches/<id>`). The model is `traces.models.Branch`."""
