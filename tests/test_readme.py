"""The README stays a short user's guide whose configuration table matches the settings.

The environment variables are read from the settings' source text (`config/settings.py`, the
`config/stepwise_settings.py` it takes in, and the env helpers they call), not by importing
them: the test needs no database and no environment. A few
(`PORT`, `STEPWISE_VENV`) are read by the `stepwise` script instead; the table may list those too.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SETTINGS = [ROOT / "config" / "settings.py", ROOT / "config" / "stepwise_settings.py"]
SCRIPT = ROOT / "stepwise"
# The module with env_str, env_int, ... (it moved from config/ to infra/).
ENV_HELPERS = [path for path in (ROOT / "infra" / "env.py", ROOT / "config" / "env.py") if path.exists()]
MAX_LINES = 300

NAME = r"[A-Z][A-Z0-9_]*"
# A call whose callee names the environment and whose first argument is a variable's name:
# env_int("NAME", ...), env_str("NAME"), os.environ.get("NAME"), os.getenv("NAME"), ...
ENV_CALL = re.compile(rf"""\b([\w.]*env[\w.]*)\(\s*(['"])({NAME})\2""", re.IGNORECASE)
# os.environ["NAME"]
ENV_INDEX = re.compile(rf"""\benviron\[\s*(['"])({NAME})\1\s*\]""")
# Any call whose first argument is a bare upper-case name: the guard against a new way of reading.
ANY_CALL = re.compile(rf"""\b([\w.]+)\(\s*(['"])({NAME})\2\s*[,)]""")


def env_names(source: str) -> set[str]:
    names = {m.group(3) for m in ENV_CALL.finditer(source)}
    names |= {m.group(2) for m in ENV_INDEX.finditer(source)}
    # ENV_CALL is case-insensitive for the callee only; the name itself must be upper case.
    return {name for name in names if re.fullmatch(NAME, name)}


def settings_env_names() -> set[str]:
    names: set[str] = set()
    for helper in [*SETTINGS, *ENV_HELPERS]:
        names |= env_names(helper.read_text())
    return names


# The script runs under `set -u`, so it reads a variable the environment may leave unset as
# `${NAME:-default}` (or `${NAME-default}`); a bare `$NAME` is one the script set itself or bash's own.
SCRIPT_DEFAULTED = re.compile(rf"\$\{{({NAME}):?[-=]")
SCRIPT_BARE = re.compile(rf"\$\{{?({NAME})\b")
SCRIPT_ASSIGNED = re.compile(rf"(?:^|[\s;(])(?:local\s+|export\s+|readonly\s+)?({NAME})\+?=", re.MULTILINE)
BASH_OWN = {"BASH_SOURCE", "SECONDS", "RANDOM", "LINENO", "PWD", "OLDPWD", "HOME", "PATH", "IFS", "FUNCNAME"}


def script_env_names(source: str) -> set[str]:
    """The variables a bash script reads from the environment: those it reads with a default,
    and any it reads bare without setting them (none today: `set -u` would stop on an unset one)."""
    assigned = set(SCRIPT_ASSIGNED.findall(source))
    bare = set(SCRIPT_BARE.findall(source)) - assigned - BASH_OWN
    return set(SCRIPT_DEFAULTED.findall(source)) | bare


def configuration_section() -> str:
    text = README.read_text()
    match = re.search(r"^## Configuration\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, "README.md has no '## Configuration' section"
    return match.group(1)


def table_names(section: str) -> set[str]:
    """The variables in the first column of the section's first table."""
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    body = rows[2:]  # below the header and its |---| line
    assert body, "the configuration table has no rows"
    names = set()
    for row in body:
        first_cell = row.split("|")[1]
        names |= set(re.findall(rf"`({NAME})`", first_cell))
    return names


def test_settings_parsing_finds_the_variables():
    names = settings_env_names()
    # If these go missing, the regexes no longer see how the settings read the environment.
    assert {"DATABASE_URL", "SECRET_KEY", "DEBUG", "STEPWISE_LEASE_SECONDS", "STEPWISE_SCORE_RATE"} <= names
    assert len(names) >= 40


def test_settings_read_the_environment_only_in_ways_this_test_knows():
    source = "\n".join(path.read_text() for path in SETTINGS)
    unknown = {
        f"{m.group(1)}({m.group(3)!r})"
        for m in ANY_CALL.finditer(source)
        if "env" not in m.group(1).lower()
    }
    assert not unknown, (
        f"the settings pass an upper-case name to {sorted(unknown)}; if that reads the "
        "environment, teach ENV_CALL in tests/test_readme.py about it"
    )


def test_every_setting_read_from_the_environment_is_in_the_readme():
    section = configuration_section()
    missing = sorted(name for name in settings_env_names() if f"`{name}`" not in section)
    assert not missing, f"README.md's Configuration section does not describe {missing}"


def test_script_parsing_finds_the_variables_the_stepwise_script_reads_and_not_its_own():
    names = script_env_names(SCRIPT.read_text())
    assert {"PORT", "STEPWISE_VENV", "STEPWISE_DATA_DIR", "STEPWISE_CHROMIUM"} <= names
    # The script's own variables and bash's are not settings.
    assert not names & {"ROOT", "VENV", "PY", "STARTED", "SECONDS", "BASH_SOURCE"}


def test_script_parsing_on_a_canned_script():
    source = 'set -u\nROOT=$(pwd)\nlocal port=${PORT:-8000} dir=${DATA-x}\necho "$ROOT $SECONDS ${ROOT}/$HOST"\n'
    assert script_env_names(source) == {"PORT", "DATA", "HOST"}


def test_every_variable_in_the_configuration_table_is_read_by_the_settings_or_the_script():
    listed = table_names(configuration_section())
    assert "PORT" in listed
    unknown = sorted(listed - settings_env_names() - script_env_names(SCRIPT.read_text()))
    assert not unknown, (
        f"README.md's configuration table lists {unknown}, which neither the settings nor ./stepwise read"
    )


def test_readme_is_short():
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_LINES, f"README.md has {lines} lines; keep it to {MAX_LINES} (details go under docs/)"


def test_every_benchmark_has_its_command_line():
    names = sorted(p.stem for p in (ROOT / "bench" / "commands").glob("*.py") if not p.stem.startswith("_"))
    assert names
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    missing = [name for name in names if f"./stepwise bench {name}" not in text]
    assert not missing, f"docs/benchmarks.md gives no command line for {missing}"


def _section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"## {title}")
    return text[start:text.index("\n## ", start + 1)]


def _keys_read_by(function) -> set[str]:
    """The string keys a parser reads off its line: `obj["k"]`, `obj.get("k")`, `"k" in obj`, `_text(obj, "k")`."""
    import ast
    import inspect
    import textwrap

    keys = set()
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(function)))):
        if isinstance(node, ast.Call) and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) \
                and node.args[0].id == "obj" and isinstance(node.args[1], ast.Constant):
            keys.add(node.args[1].value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "obj":
            keys.add(node.args[0].value)
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) \
                and isinstance(node.comparators[0], ast.Name) and node.comparators[0].id == "obj":
            keys.add(node.left.value)
    return {key for key in keys if isinstance(key, str)}


def test_the_generic_format_table_names_exactly_the_fields_the_importer_reads():
    from annotate.pool.importing.formats.generic import parse_generic

    generic = _section("Import formats").split("**Generic**")[1].split("**PRM800K**")[0]
    documented = set(re.findall(r"`([a-z_]+)`", generic))
    assert documented == _keys_read_by(parse_generic)


def test_the_prm800k_list_names_every_key_of_the_schema():
    from annotate.pool.prm800k import schema

    prm800k = _section("Import formats").split("**PRM800K**")[1]
    documented = set(re.findall(r"`([a-z_]+)`", prm800k))
    keys = {*schema.LINE_KEYS, *schema.QUESTION_KEYS, *schema.LABEL_KEYS, *schema.STEP_KEYS, *schema.COMPLETION_KEYS}
    assert keys <= documented, sorted(keys - documented)
    assert set(schema.FINISH_REASONS) <= documented


def _export_table_fields() -> dict[str, str]:
    """Each format of the Exports table, with its 'fields' cell."""
    rows = [line.split("|") for line in _section("Exports").splitlines() if line.startswith("| `")]
    return {re.fullmatch(r"\s*`(\w+)`\s*", row[1]).group(1): row[3] for row in rows}


def _columns_written(format) -> set[str]:
    """The top-level columns of a format's rows, automatic ones included, as its writer declares them:
    the Arrow schema of its Parquet and dataset exports, which the container tests hold to the JSON Lines
    rows. Placeholder types, so that no `datasets` import is needed."""
    from annotate.pool.exporting.formats.base import ArrowTypes

    placeholders = ArrowTypes(text="string", integer="int64", number="float64", boolean="bool",
                              list_of=lambda item: [item])
    return set(format.features(placeholders, True))


def test_the_exports_table_names_every_column_each_format_writes():
    from annotate.pool.exporting.formats import FORMATS

    table = _export_table_fields()
    assert set(table) == set(FORMATS)
    prm800k_schema = set(re.findall(r"`([a-z_]+)`", _section("Import formats").split("**PRM800K**")[1]))
    for name, format in FORMATS.items():
        documented = set(re.findall(r"`([a-z_]+)`", table[name]))
        if "as above" in table[name]:
            documented |= prm800k_schema
        missing = sorted(_columns_written(format) - documented)
        assert not missing, f"README.md's Exports table does not name the {name} columns {missing}"


def test_the_columns_checked_include_those_trl_rows_carry():
    from annotate.pool.exporting.formats import FORMATS

    # If this fails, the check above reads something other than the rows, not a gap in the README.
    assert {"prompt", "completions", "labels", "assistance", "label_source"} <= _columns_written(FORMATS["trl"])
