"""The labeling fast path's house rules that import-linter cannot check: its modules import each
other one way and stay short, and its pages render in one template engine with the site's layout.
(Raw SQL fenced in and infra as the ground floor are contracts in pyproject.toml.)"""
import ast
import re
from pathlib import Path

import pytest
from django.test import Client

import annotate
from annotate.labeling import queue_items
from tests.factories import user_with_role

ROOT = Path(annotate.__file__).resolve().parent.parent
LABELING = ROOT / "annotate" / "labeling"


def imported(path: Path) -> set[str]:
    """The modules a file imports, by name (`from a import b` counts a.b too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def test_the_labeling_modules_import_each_other_one_way():
    modules = {module_name(path): path for path in LABELING.glob("*.py") if path.name != "__init__.py"}
    imports = {name: {other for other in modules if other in imported(path)} for name, path in modules.items()}

    def reaches(start: str, target: str, seen: set) -> bool:
        return any(nxt == target or (nxt not in seen and reaches(nxt, target, seen | {nxt}))
                   for nxt in imports[start])

    circles = sorted(name for name in modules if reaches(name, name, {name}))
    assert not circles, circles


@pytest.mark.parametrize("package", ["annotate/labeling", "annotate/web", "infra"])
def test_no_module_of_the_fast_path_passes_400_lines(package):
    long = {path.name: n for path in (ROOT / package).rglob("*.py") if (n := len(path.read_text().splitlines())) > 400}
    assert not long, long


def test_the_fast_path_names_at_most_five_concepts():
    concepts = re.findall(r"^\d\. \*\*", annotate.labeling.__doc__, flags=re.MULTILINE)
    assert 0 < len(concepts) <= 5


def head_and_top_bar(page: str) -> str:
    """A page's head and top bar, its title and per-page parts left out."""
    head = page[page.index("<head>"):page.index('<a class="skip"')]
    head = re.sub(r"<title>.*?</title>", "", head)
    head = re.sub(r'\s*<link rel="stylesheet" href="[^"]*katex[^"]*">', "", head)
    top_bar = page[page.index('<header class="topbar">'):page.index("</header>")]
    tokens = r'(name="csrfmiddlewaretoken" value=|"X-CSRFToken": )"[^"]*"'
    return re.sub(tokens, r"\1", re.sub(r"\s+", " ", head + top_bar))


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["annotator", "reviewer", "admin"])
def test_the_labeling_pages_have_the_sites_head_and_top_bar(role):
    user = user_with_role(f"{role}-layout", role, is_staff=role == "admin", is_superuser=role == "admin")
    client = Client()
    client.force_login(user)
    jinja_page = client.get("/p/default/label/").content.decode()  # templates/jinja2/layout.jinja
    django_page = client.get("/p/default/").content.decode()  # templates/base.html
    assert head_and_top_bar(jinja_page) == head_and_top_bar(django_page)
    assert queue_items.available_count() == 0 and "0 solutions waiting" in jinja_page
