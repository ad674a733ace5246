"""Browsers ask for /favicon.ico on every site: it answers, and the pages link the SVG icon."""
from django.contrib.staticfiles import finders


def test_favicon_ico_leads_to_the_svg_icon_the_pages_link(client, db):
    answer = client.get("/favicon.ico")
    assert answer.status_code == 302 and answer["Location"].endswith("/favicon.svg")
    assert finders.find("favicon.svg")
    login_page = client.get("/accounts/login/").content.decode()
    assert f'<link rel="icon" href="{answer["Location"]}" type="image/svg+xml">' in login_page
