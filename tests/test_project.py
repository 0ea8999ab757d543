"""The project's own promises: installable files agree, one repository URL, CI calls the README's command."""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def requirement_lines(text):
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def name_of(spec):
    return re.split(r"[<>=!~\s\[]", spec, maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_lists_exactly_the_requirements():
    requirements = requirement_lines((ROOT / "requirements.txt").read_text())
    env = (ROOT / "environment.yml").read_text()
    pip_section = env.split("- pip:")[1]
    pip_specs = [line.strip()[2:].strip() for line in pip_section.splitlines() if line.strip().startswith("- ")]
    assert [s for s in pip_specs if s != "-e ."] == requirements
    assert "-e ." in pip_specs


def test_constraints_pin_every_requirement_and_torch_2_13():
    pins = dict(line.split("==") for line in requirement_lines((ROOT / "constraints.txt").read_text()))
    pins = {name_of(k): v for k, v in pins.items()}
    assert pins["torch"] == "2.13.0"
    for spec in requirement_lines((ROOT / "requirements.txt").read_text()):
        assert name_of(spec) in pins, f"{spec} is not pinned in constraints.txt"


def test_package_dependencies_are_a_subset_of_the_requirements():
    pyproject = (ROOT / "pyproject.toml").read_text()
    deps = re.search(r"dependencies = \[(.*?)\]", pyproject, re.S).group(1)
    package = {s.strip().strip('"') for s in deps.split(",") if s.strip()}
    assert package <= set(requirement_lines((ROOT / "requirements.txt").read_text()))


def test_one_repository_url_everywhere():
    url = re.search(r'Repository = "([^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    found = set()
    for path in [ROOT / "README.md", *sorted((ROOT / "notebooks").glob("*.ipynb"))]:
        text = path.read_text()
        found |= set(re.findall(r"https://github\.com/[\w.-]+/[\w.-]+", text))
        found |= {
            "https://github.com/" + m
            for m in re.findall(r"colab\.research\.google\.com/github/([\w.-]+/[\w.-]+)", text)
        }
    assert found - {"https://github.com/rasbt/LLMs-from-scratch"} == {url}  # the book's code is cited, not ours


def test_ci_runs_the_readme_test_command():
    """The README gives a learner two commands, make lab first; every other command is for contributors and is
    documented in CONTRIBUTING.md (and make help), never in the README."""
    readme = (ROOT / "README.md").read_text()
    assert "make lab" in readme and "make test" in readme and readme.index("make lab") < readme.index("make test")
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    commands = set(re.findall(r"\bmake ([a-z][\w-]*)", readme))
    assert commands == {"lab", "test", "help"}, f"commands in the README beyond lab, test and help: {commands}"
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M)) - {"help"}
    undocumented = sorted(t for t in targets if f"make {t}" not in contributing)
    assert not undocumented, f"CONTRIBUTING.md does not mention: {undocumented}"


def test_readme_lists_every_notebook():
    readme = (ROOT / "README.md").read_text()
    for path in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"):
        assert f"notebooks/{path.name}" in readme, path.name


def test_importing_the_package_is_light_and_plotting_loads_on_first_use():
    script = """
import sys
import attention_helpers as ah
heavy = [m for m in ("matplotlib", "IPython", "ipywidgets") if m in sys.modules]
assert not heavy, f"import attention_helpers imported {heavy}"
from attention_helpers import plot_attention
assert "matplotlib" in sys.modules and plot_attention is ah.plot_attention
assert callable(ah.temperature_widget) and "ipywidgets" in sys.modules
assert "plot_attention_heads" in dir(ah) and set(ah.__all__) <= set(dir(ah))
try:
    ah.no_such_name
except AttributeError as error:
    assert "no_such_name" in str(error)
else:
    raise AssertionError("a missing name must raise AttributeError")
"""
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT, env={**os.environ, "MPLBACKEND": "Agg"})


def test_import_and_import_star_leave_matplotlib_and_ipywidgets_out():
    """``from attention_helpers import *`` imports every name in ``__all__``: the viz names must not be there."""
    for statement in ("import attention_helpers", "from attention_helpers import *"):
        script = f"""
import sys
{statement}
heavy = [m for m in ("matplotlib", "ipywidgets") if m in sys.modules]
assert not heavy, f"{statement} imported {{heavy}}"
"""
        subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT)


def test_every_viz_name_is_reachable_from_the_package_and_listed_once():
    import attention_helpers as ah
    from attention_helpers import viz

    assert viz.__all__ and len(set(viz.__all__)) == len(viz.__all__)
    assert not set(ah.__all__) & set(viz.__all__), "a name is listed in both __all__s"
    assert set(viz.__all__) <= set(dir(ah)) and set(viz.__all__) <= set(dir(viz))
    for name in viz.__all__:
        value = getattr(ah, name)
        assert value is getattr(viz, name), name
        # defined in the viz submodule it is found in, not a name that module imported
        assert value.__module__.startswith("attention_helpers.viz."), (name, value.__module__)


def _private_imports(path: Path) -> list[str]:
    """``from <a module of the package> import _name`` statements in ``path`` (``_checks`` is shared on purpose)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        module = node.module or ""
        if not (node.level or module == "attention_helpers" or module.startswith("attention_helpers.")):
            continue
        for alias in node.names:
            if alias.name.startswith("_") and alias.name != "_checks":
                found.append(
                    f"{path.relative_to(ROOT)}:{node.lineno}: from {'.' * node.level}{module} import {alias.name}"
                )
    return found


def test_no_module_imports_a_private_name_from_another():
    found = [line for path in sorted((ROOT / "attention_helpers").rglob("*.py")) for line in _private_imports(path)]
    assert not found, "private names imported across modules:\n" + "\n".join(found)


MAX_LINES = {"class": 150, "function": 50}


def _definition_sizes(tree: ast.AST, prefix: str = ""):
    """(qualified name, "class" or "function", lines) for every class and function, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{node.name}"
            kind = "class" if isinstance(node, ast.ClassDef) else "function"
            yield name, kind, node.end_lineno - node.lineno + 1
            yield from _definition_sizes(node, f"{name}.")
        else:
            yield from _definition_sizes(node, prefix)


def test_no_class_over_150_lines_and_no_function_over_50_lines():
    too_long = {}  # (module, name): (kind, lines)
    for path in sorted((ROOT / "attention_helpers").rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        for name, kind, lines in _definition_sizes(ast.parse(path.read_text())):
            if lines > MAX_LINES[kind]:
                too_long[module, name] = (kind, lines)
    offenders = [
        f"{module}: {kind} {name} has {lines} lines (at most {MAX_LINES[kind]})"
        for (module, name), (kind, lines) in sorted(too_long.items())
    ]
    assert not offenders, "split these along their ideas:\n" + "\n".join(offenders)


def test_multi_head_attention_forward_reads_in_at_most_40_lines():
    """Lesson 06's class is read in one sitting: its forward says the computation, its helpers do the rest."""
    tree = ast.parse((ROOT / "attention_helpers" / "attention.py").read_text())
    sizes = {name: lines for name, _, lines in _definition_sizes(tree)}
    assert sizes["MultiHeadAttention.forward"] <= 40, (
        f"MultiHeadAttention.forward has {sizes['MultiHeadAttention.forward']} lines"
    )


# issue 41: the modules a learner reads for the computation, and the checks they share
CORE_MODULES = (
    "attention",
    "rope",
    "decoding",
    "gpt",
    "encoder",
    "encoder_decoder",
    "efficient",
    "functional",
    "_checks",
)
MAX_CORE_LINES = 2000


def test_the_core_modules_and_their_checks_hold_at_most_2000_lines():
    counts = {name: len((ROOT / "attention_helpers" / f"{name}.py").read_text().splitlines()) for name in CORE_MODULES}
    total = sum(counts.values())
    assert total <= MAX_CORE_LINES, (
        f"the core modules and _checks.py hold {total} lines, more than {MAX_CORE_LINES}: "
        + ", ".join(f"{name} {lines}" for name, lines in counts.items())
    )


def test_the_wheel_holds_every_module_and_every_diagram_of_images(tmp_path):
    """A non-editable install (``pip install <repository URL>``) has only what the wheel holds: every module,
    subpackages included, the trained date translator's weights, and every diagram of the top-level images/ (which
    attention_helpers/viz/images links to), as a file where ``diagram_path`` finds it, among them every diagram
    ``show_diagram`` is called with."""
    import zipfile

    import attention_helpers as ah

    source = tmp_path / "source"  # a copy, so that the build leaves nothing in the working tree
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("attention_helpers", "images"):  # the symlink stays a symlink, as in a git clone
        shutil.copytree(ROOT / name, source / name, ignore=ignore, symlinks=True)
    assert (source / "attention_helpers" / "viz" / "images").is_symlink()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    build = ["--no-deps", "--no-build-isolation", "--no-index", "--quiet", "--wheel-dir", str(tmp_path / "wheel")]
    subprocess.run([sys.executable, "-m", "pip", "wheel", *build, str(source)], check=True, cwd=tmp_path)
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = {name: archive.read(name) for name in archive.namelist()}

    package = Path(ah.__file__).resolve().parent
    modules = {f"attention_helpers/{p.relative_to(package).as_posix()}" for p in package.rglob("*.py")}
    assert modules <= in_wheel.keys(), f"modules missing from the wheel: {sorted(modules - in_wheel.keys())}"
    weights = f"attention_helpers/{ah.dates.PRETRAINED_WEIGHTS.relative_to(package).as_posix()}"
    assert in_wheel.get(weights) == ah.dates.PRETRAINED_WEIGHTS.read_bytes(), "the date translator lesson 01 loads"
    diagrams = {p.stem: p.read_bytes() for p in (ROOT / "images").glob("*.png")}
    shown = set()
    for path in [*(ROOT / "notebooks").glob("*.ipynb"), *(ROOT / "solutions").glob("*.ipynb")]:
        shown |= set(re.findall(r'show_diagram\(\\"([^"\\]+)\\"', path.read_text()))
    assert shown and shown <= diagrams.keys(), f"shown: {sorted(shown)}, in images/: {sorted(diagrams)}"
    for name, data in sorted(diagrams.items()):
        path = ah.diagram_path(name)  # unresolved: where the installed package looks
        assert path.is_relative_to(package), f"diagram_path({name!r}) = {path} is outside the package {package}"
        assert in_wheel.get(f"attention_helpers/{path.relative_to(package).as_posix()}") == data, f"{name}.png"


def _lower_bounds(specs):
    """{package: lower bound} for every `name>=version` in specs."""
    bounds = {}
    for spec in specs:
        match = re.search(r">=\s*([\d.]+)", spec)
        if match:
            bounds[name_of(spec)] = match.group(1)
    return bounds


def _version(text):
    return tuple(int(part) for part in text.split("."))


def test_no_lower_bound_exceeds_what_colab_ships():
    """On Colab the setup cell installs the package into a running kernel: a bound above Colab's own version
    upgrades IPython or traitlets under it (tests/colab_versions.txt says where the versions come from)."""
    colab = dict(line.split("==") for line in requirement_lines((ROOT / "tests" / "colab_versions.txt").read_text()))
    pyproject = (ROOT / "pyproject.toml").read_text()
    deps = re.search(r"dependencies = \[(.*?)\]", pyproject, re.S).group(1)
    package_specs = [s.strip().strip('"') for s in deps.split(",") if s.strip()]
    requirement_specs = requirement_lines((ROOT / "requirements.txt").read_text())
    for source, specs in (("pyproject.toml", package_specs), ("requirements.txt", requirement_specs)):
        for name, bound in _lower_bounds(specs).items():
            if name in colab:
                assert _version(bound) <= _version(colab[name]), (
                    f"{source}: {name}>={bound} but Colab has {colab[name]}"
                )
    assert {"ipython", "traitlets", "ipywidgets", "torch"} <= set(colab)


def test_readme_names_the_lessons_that_have_widgets():
    """The README says which lessons have widgets; it must be the lessons whose cells show one."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    match = re.search(r"Lessons ([\d, and]+) also have widgets", readme)
    assert match, "the README must say which lessons have widgets"
    named = set(re.findall(r"\d\d", match.group(1)))
    with_widgets = {p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb") if "_widget(" in p.read_text()}
    assert named == with_widgets
