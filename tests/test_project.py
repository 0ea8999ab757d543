"""The project's own promises: installable files agree, one repository URL, CI calls the README's command."""

import re
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
    assert found == {url}


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make lab" in readme and "make test" in readme
    assert readme.index("make lab") < readme.index("make run") and readme.index("make test") < readme.index("make run")
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_readme_lists_every_notebook():
    readme = (ROOT / "README.md").read_text()
    for path in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"):
        assert f"notebooks/{path.name}" in readme, path.name


def test_package_modules_import_on_their_own_without_cycles():
    order = ["data", "functional", "attention", "encoder", "pretrained"]
    order += ["plotting", "widgets", "plotting_pretrained", "interop", "exercises"]
    for module in order:
        subprocess.run([sys.executable, "-c", f"import attention_helpers.{module}"], check=True, cwd=ROOT)
    for i, module in enumerate(order[:4]):
        text = (ROOT / "attention_helpers" / f"{module}.py").read_text()
        for later in order[i + 1 :]:
            assert f"from .{later} import" not in text, f"{module} imports {later}: imports must flow one way"
