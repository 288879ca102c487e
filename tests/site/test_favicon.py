"""The site's icon: linked from every page, and `/favicon.ico` points at the same file."""

from __future__ import annotations

import pytest
from django.contrib.staticfiles import finders
from django.templatetags.static import static
from django.test import Client

pytestmark = pytest.mark.django_db


def test_favicon_ico_redirects_to_the_icon_every_page_links(client: Client) -> None:
    response = client.get("/favicon.ico")
    assert response.status_code == 302
    assert response["Location"] == static("img/favicon.svg")

    page = client.get("/accounts/login/").content.decode()
    assert f'<link rel="icon" href="{static("img/favicon.svg")}" type="image/svg+xml">' in page

    icon = finders.find("img/favicon.svg")
    assert icon is not None
    with open(icon, encoding="utf-8") as f:
        assert f.read().startswith("<svg xmlns=")
