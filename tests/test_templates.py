"""What every page's markup keeps to, read from the templates themselves."""
import re
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


def test_every_table_of_a_page_sits_in_a_scrolling_wrapper():
    # A table as wide as its content (long model names, buttons) would stick out of its card and
    # widen the page; `.table-scroll` (static/css/stepwise.css) scrolls it inside the card instead.
    # Django templates only: the labeling page's (Jinja) one table is the keyboard help, in a dialog.
    tables = {path.relative_to(TEMPLATES).as_posix(): re.findall(r"(.{0,40})<table\b", path.read_text())
              for path in TEMPLATES.rglob("*.html")}
    assert sum(len(found) for found in tables.values()) >= 15
    bare = {name: found for name, found in tables.items() if any(not before.endswith('<div class="table-scroll">')
                                                                  for before in found)}
    assert not bare, f"tables outside a <div class=\"table-scroll\">: {bare}"
