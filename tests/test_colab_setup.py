"""The notebooks' setup cell on Colab, simulated: a fake `google.colab` module and a local repository URL.

The cell runs in a throwaway virtual environment (which sees this environment's packages through a .pth
file, so that nothing is downloaded but the build backend) and must install the package with pip from a git
clone of the repository, then import it in the same running interpreter (no restart), with its package data.
"""

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))[0]

RUN_CELL = """
import json, os, sys
import google.colab  # Colab's kernel has imported it before any cell runs
from IPython.core.interactiveshell import InteractiveShell
InteractiveShell.enable_gui = lambda self, gui=None: None  # `%matplotlib inline` needs no event loop here
shell = InteractiveShell.instance()
result = shell.run_cell(open(sys.argv[1]).read())
result.raise_error()
import attention_helpers
print(json.dumps({
    "module": attention_helpers.__file__,
    "diagram": str(attention_helpers.diagram_path("attention_pipeline")),
    "diagrams": sorted(p.name for p in attention_helpers.diagram_path("attention_pipeline").parent.glob("*.png")),
}))
"""


def local_repository(tmp_path: Path) -> Path:
    """A git repository holding this working tree as it is now, to stand in for the GitHub URL (symlinks stay
    symlinks, as git commits them: attention_helpers/viz/images links to images/)."""
    remote = tmp_path / "remote"
    ignore = shutil.ignore_patterns(".git", ".venv", "build", "__pycache__", ".*_cache", "*.egg-info")
    shutil.copytree(ROOT, remote, ignore=ignore, symlinks=True)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid", "-C", str(remote)]
    for args in (["init", "--quiet"], ["add", "--all"], ["commit", "--quiet", "-m", "snapshot"]):
        subprocess.run([*git, *args], check=True)
    return remote


@pytest.mark.slow
def test_setup_cell_installs_the_package_from_a_clone_on_colab(tmp_path):
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    setup_source = "".join(next(c for c in cells if c["cell_type"] == "code")["source"])
    assert '"google.colab" in sys.modules' in setup_source
    cell = tmp_path / "setup_cell.py"
    cell.write_text(setup_source)

    fake = tmp_path / "fake_modules" / "google" / "colab"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text('"""Stands in for Colab: the setup cell only checks that it is imported."""\n')

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    venv_site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(venv_site, "outer_environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")

    content = tmp_path / "content"  # Colab's working directory
    content.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path / "fake_modules"),
        "SERIES_REPO_URL": local_repository(tmp_path).as_uri(),
        "MPLBACKEND": "Agg",
    }
    env.pop("VIRTUAL_ENV", None)
    run = subprocess.run(
        [python, "-c", RUN_CELL, str(cell)], cwd=content, env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])

    installed = subprocess.run(
        [python, "-m", "pip", "show", "-f", "attention-helpers"], capture_output=True, text=True, env=env, check=True
    ).stdout
    location = Path(next(line for line in installed.splitlines() if line.startswith("Location:")).split(": ", 1)[1])
    assert location.resolve() == Path(venv_site).resolve(), installed  # installed into Colab's (the venv's) Python
    assert Path(report["module"]).resolve().is_relative_to(location.resolve()), report  # imported from there
    assert Path(report["diagram"]).is_file() and Path(report["diagram"]).is_relative_to(Path(report["module"]).parent)
    assert report["diagrams"] == sorted(p.name for p in (ROOT / "images").glob("*.png")), report  # every diagram


FAILING_CELL = """
import sys
import google.colab
from IPython.core.interactiveshell import InteractiveShell
InteractiveShell.enable_gui = lambda self, gui=None: None
shell = InteractiveShell.instance()
result = shell.run_cell(open(sys.argv[1]).read())
print("error:", type(result.error_in_exec).__name__)
"""


def test_a_failed_install_gives_one_sentence_not_a_traceback(tmp_path):
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    cell = tmp_path / "setup_cell.py"
    cell.write_text("".join(next(c for c in cells if c["cell_type"] == "code")["source"]))
    fake = tmp_path / "fake_modules" / "google" / "colab"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    content = tmp_path / "content"
    content.mkdir()
    missing = (tmp_path / "no-such-repository").as_uri()
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake_modules"), "SERIES_REPO_URL": missing, "MPLBACKEND": "Agg"}
    run = subprocess.run(
        [sys.executable, "-c", FAILING_CELL, str(cell)],
        cwd=content,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = run.stdout + run.stderr
    assert "error: SetupError" in run.stdout, output
    assert "Setup failed: run this cell again." in output
    assert "Traceback" not in output and "CalledProcessError" not in output, output
