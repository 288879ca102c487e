"""Every environment variable the settings read is documented: in the settings table of the deployment guide
(docs/guide/deployment.md) and in .env.example."""

from __future__ import annotations

import re

from tests.conftest import ROOT

READERS = r"env(?:str|bool|int|list|choice|broker|database|float|cache)"


def setting_variables() -> set[str]:
    source = (ROOT / "arcana_site" / "settings.py").read_text()
    return set(re.findall(READERS + r'\(\s*"([A-Z][A-Z0-9_]+)"', source))


def test_it_reads_variables_from_the_settings() -> None:
    # The scan itself must see the variables (a changed reader name would make the checks below empty).
    assert {"SECRET_KEY", "DATABASE_URL", "LOG_LEVEL", "ARCANA_STORAGE"} <= setting_variables()


def test_it_documents_every_variable_in_the_deployment_guides_table() -> None:
    guide = (ROOT / "docs" / "guide" / "deployment.md").read_text()
    table = "\n".join(line for line in guide.splitlines() if line.startswith("| `"))
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", table))
    assert setting_variables() - documented == set()


def test_it_lists_every_variable_in_the_env_example() -> None:
    example = (ROOT / ".env.example").read_text()
    listed = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", example, flags=re.M))
    assert setting_variables() - listed == set()
    # …and nothing the settings do not read (provider keys are named by ARCANA_PROVIDERS, not read here).
    assert listed - setting_variables() <= {"OPENAI_API_KEY"}
