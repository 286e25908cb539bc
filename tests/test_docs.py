"""The plugin docs are part of the API: every hook and public name is in the reference, every
hook has a test, and the tutorial's code, taken from the docs, installs and runs.

Meta-tests in the manner of datasette's test_plugins.py: they fail when the code gains a hook
or a public name that the docs (or the tests) do not have.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import gpuagent
from gpuagent import hookspecs

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "plugins"
PAGES = ("README.md", "tutorial.md", "reference.md", "testing.md", "compatibility.md")

FENCE = re.compile(r"^```(\w*)(?:[ \t]+title=\"([^\"]+)\")?[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def hook_specs() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(fn)
        for name, fn in vars(hookspecs).items()
        if name.startswith("gpuagent_") and hasattr(fn, "gpuagent_spec")
    }


def public_names() -> list[str]:
    return [n for n in gpuagent.__all__ if n != "__version__"]


def read(page: str) -> str:
    return (DOCS / page).read_text()


def section(text: str, heading: str) -> str:
    """The text under a markdown heading, up to the next heading of the same or a higher level."""
    m = re.search(rf"^(#+) {re.escape(heading)}\s*$", text, re.M)
    assert m, f"no heading {heading!r}"
    level = len(m.group(1))
    rest = text[m.end() :]
    nxt = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[: nxt.start()] if nxt else rest


def blocks(text: str) -> list[tuple[str, str | None, str]]:
    """(language, title, body) for every top-level fenced block."""
    return [(lang, title, body) for lang, title, body in FENCE.findall(text)]


# -- the reference -------------------------------------------------------------------


def test_hookspecs_found():
    assert set(hook_specs()) >= {
        "gpuagent_register_collectors",
        "gpuagent_register_sinks",
        "gpuagent_register_commands",
    }


@pytest.mark.parametrize("hook", sorted(hook_specs()))
def test_every_hook_has_a_signature_heading_a_purpose_and_an_example(hook):
    sig = hook_specs()[hook]
    heading = f"`{hook}({', '.join(sig.parameters)})`"
    body = section(read("reference.md"), heading)
    prose = re.sub(r"```.*?```", "", body, flags=re.S)
    assert len(prose.split()) >= 20, f"{hook}: say what it is for"
    examples = [b for lang, _, b in blocks(body) if lang == "python"]
    assert examples and any(f"def {hook}(" in b and "@gpuagent.hookimpl" in b for b in examples), (
        f"{hook}: the reference needs an example implementing it"
    )
    for example in examples:
        compile(example, f"reference.md:{hook}", "exec")


@pytest.mark.parametrize("hook", sorted(hook_specs()))
def test_every_hook_has_a_docstring(hook):
    assert (getattr(hookspecs, hook).__doc__ or "").strip(), f"{hook} has no docstring"


@pytest.mark.parametrize("name", public_names())
def test_every_public_name_is_in_the_reference_with_its_members(name):
    body = section(read("reference.md"), f"`gpuagent.{name}`")
    assert len(body.split()) >= 20, f"gpuagent.{name}: the reference says too little"
    obj = getattr(gpuagent, name)
    members: set[str] = set()
    if inspect.isclass(obj):
        members = {m for m in vars(obj) if not m.startswith("_") and m != "model_config"}
        members |= set(getattr(obj, "model_fields", {}))
    missing = sorted(m for m in members if not re.search(rf"`[^`\n]*\b{re.escape(m)}\b[^`\n]*`", body))
    assert not missing, f"gpuagent.{name}: reference.md does not mention {missing}"


def test_reference_lists_no_hook_or_name_that_does_not_exist():
    text = "".join(read(p) for p in PAGES)
    for hook in set(re.findall(r"(?<![#\w])gpuagent_register_\w+", text)):
        assert hook in hook_specs() or hook == "gpuagent_register_colectors", f"docs name an unknown hook {hook}"
    for name in set(re.findall(r"`gpuagent\.([A-Z]\w*)`", text)):
        assert name in gpuagent.__all__, f"docs name gpuagent.{name}, which gpuagent does not export"


def test_compatibility_policy_covers_every_hook_and_public_name():
    text = read("compatibility.md")
    for name in [*hook_specs(), *public_names()]:
        assert f"`{name}" in text, f"compatibility.md does not cover {name}"
    assert "minor release" in text


def test_testing_page_documents_every_fixture_of_gpuagent_testing():
    import gpuagent.testing as kit

    fixtures = sorted(
        n
        for n, v in vars(kit).items()
        if hasattr(v, "_pytestfixturefunction") or type(v).__name__ == "FixtureFunctionDefinition"
    )
    assert fixtures, "gpuagent.testing has no fixtures"
    text = read("testing.md")
    for fixture in fixtures:
        assert re.search(rf"^#+ `{fixture}`", text, re.M), f"testing.md has no section for the fixture {fixture}"


def test_the_test_kit_ships_its_dependencies_as_the_testing_extra():
    """gpuagent.testing imports pytest, which gpuagent itself does not install: a plugin author
    following testing.md gets it from the `testing` extra the page names."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    extras = cfg["options.extras_require"]
    assert "testing" in extras, "setup.cfg has no `testing` extra"
    testing = {re.split(r"[<>=!~ ]", r.strip())[0] for r in extras["testing"].strip().splitlines()}
    installed = {re.split(r"[<>=!~ ]", r.strip())[0] for r in cfg["options"]["install_requires"].strip().splitlines()}
    kit = (REPO / "agent" / "testing.py").read_text()
    imported = set(re.findall(r"^\s*(?:import|from) (\w+)", kit, re.M)) - {
        "gpuagent",
        "__future__",
        *sys.stdlib_module_names,
    }
    assert imported, "found no third-party import in agent/testing.py"
    missing = {m for m in imported if m not in testing | installed and m != "pynvml"}
    assert not missing, f"gpuagent.testing imports {missing}, in neither install_requires nor the testing extra"
    assert "gpuagent[testing]" in read("testing.md")


def test_relative_links_resolve():
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", read(page)):
            assert (DOCS / target).exists(), f"{page}: broken link {target}"


# -- each hook has a test (datasette's test_plugin_hooks_have_tests) -------------------


@pytest.mark.parametrize("hook", sorted(hook_specs()))
def test_every_hook_has_a_test(hook):
    sources = "".join(p.read_text() for p in (REPO / "tests").rglob("test_*.py"))
    assert re.search(rf"^def test_hook_{hook}\b", sources, re.M), f"no test named test_hook_{hook} in tests/"


# -- the tutorial, from the docs, installed and run -------------------------------------


def can_build_without_isolation() -> bool:
    # setuptools>=70.1 has bdist_wheel itself; older ones need the wheel package.
    return bool(importlib.util.find_spec("setuptools.command.bdist_wheel") or importlib.util.find_spec("wheel"))


def strip_time(line: str) -> str:
    return re.sub(r" \d{16,}$", "", line)


def matches(expected: str, actual: str) -> bool:
    """`…` in a documented output line stands for anything."""
    pattern = ".*".join(re.escape(part) for part in expected.split("…"))
    return re.fullmatch(pattern, actual) is not None


@pytest.mark.slow
def test_tutorial_code_installs_and_runs(tmp_path):
    tutorial = read("tutorial.md")
    files = {title: body for _, title, body in blocks(tutorial) if title}
    assert {"pyproject.toml", "gpuagent_settings/__init__.py", "gpuagent.toml"} <= set(files)
    project = tmp_path / "gpuagent-settings"
    for rel, body in files.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(body)

    # The tutorial's `pip install -e .`, into a throwaway target instead of the test's environment.
    target = tmp_path / "site"
    pip = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--disable-pip-version-check",
        "--target",
        str(target),
    ]
    if can_build_without_isolation():
        pip.append("--no-build-isolation")
    built = subprocess.run([*pip, str(project)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    assert (target / "gpuagent_settings" / "__init__.py").is_file()

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH")])),
        "GPUAGENT_CONFIG": str(project / "gpuagent.toml"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    env.pop("GPUAGENT_DISABLE_PLUGINS", None)

    def gpuagent_cmd(args: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "gpuagent", *args], capture_output=True, text=True, env=env, cwd=project, timeout=120
        )

    # Every `$ gpuagent …` command of the tutorial, checked against the output shown under it.
    ran = []
    for lang, _, body in blocks(tutorial):
        if lang != "console":
            continue
        lines = body.splitlines()
        for i, line in enumerate(lines):
            if not line.startswith("$ gpuagent "):
                continue
            command, _, pipe = line[2:].partition("|")
            expected = []
            for out in lines[i + 1 :]:
                if out.startswith("$ "):
                    break
                expected.append(out)
            result = gpuagent_cmd(shlex.split(command)[1:])
            assert result.returncode == 0, f"{command}: {result.stderr}"
            actual = result.stdout.splitlines()
            if pipe.strip().startswith("grep "):
                word = shlex.split(pipe)[1]
                actual = [a for a in actual if word in a]
            if expected:
                assert [strip_time(a) for a in actual] == [strip_time(e) for e in expected] or (
                    len(actual) == len(expected) and all(matches(e, a) for e, a in zip(expected, actual, strict=True))
                ), f"{command}: expected {expected}, got {actual}"
            ran.append((command.split()[1], result))
    commands = [c for c, _ in ran]
    assert {"plugins", "run", "config"} <= set(commands), commands

    # The JSON the tutorial shows for the plugin is what `gpuagent plugins --json` says.
    listed = json.loads(next(r for c, r in ran if c == "plugins").stdout)["plugins"]
    shown = json.loads(next(b for lang, _, b in blocks(tutorial) if lang == "json" and '"settings"' in b))
    assert next(p for p in listed if p["name"] == "settings") == shown

    # The one-line error the tutorial shows for a mistyped key.
    typo = project / "typo.toml"
    typo.write_text(files["gpuagent.toml"].replace("want_persistence", "want_persistance"))
    check = gpuagent_cmd(["config", "check", str(typo)])
    documented = re.search(r"^gpuagent: error: .*$", tutorial, re.M).group(0)
    assert check.returncode == 1
    assert check.stderr.strip() == documented.replace("gpuagent.toml:", f"{typo}:")  # the path as given

    # testing.md's test file, run with pytest against the installed tutorial plugin.
    tests = {title: body for _, title, body in blocks(read("testing.md")) if title}
    assert "tests/test_settings.py" in tests
    (project / "tests").mkdir()
    (project / "tests" / "test_settings.py").write_text(tests["tests/test_settings.py"])
    pytest_run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_settings.py"],
        capture_output=True,
        text=True,
        env=env,
        cwd=project,
        timeout=120,
    )
    assert pytest_run.returncode == 0, pytest_run.stdout + pytest_run.stderr
    assert "5 passed" in pytest_run.stdout
