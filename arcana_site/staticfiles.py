"""Static files with hashed, compressed names once `collectstatic` has run, plain names before.

`collectstatic` (run by scripts/run and in production) writes whitenoise's manifest, and pages then
link `run.3f2a9c1b.css`, cached for a year. A server started from a checkout without it (tests,
benchmarks, `manage.py runserver`) still works: a file the manifest does not know is linked by its
plain name, which whitenoise serves from the finders.
"""

from __future__ import annotations

from django.contrib.staticfiles.storage import StaticFilesStorage
from whitenoise.storage import CompressedManifestStaticFilesStorage


class StaticStorage(CompressedManifestStaticFilesStorage):
    manifest_strict = False

    def url(self, name: str | None, force: bool = False) -> str:
        try:
            return super().url(name, force)
        except ValueError:  # not collected: no manifest entry and no file to hash
            return StaticFilesStorage.url(self, name)
