"""`make colab-check`: run every notebook the way Colab would, with Colab's versions of IPython and widgets.

1. A separate virtual environment (build/colab-venv) gets the versions in tests/colab_versions.txt of IPython,
   traitlets, ipywidgets and torch, and what papermill needs to run a kernel; not the package itself. So a lesson
   that needs a newer torch than Colab's fails here first. PyPI has no CPU-only torch for Linux: its wheel brings
   CUDA libraries (torch 2.11.0: 2.6 GB to download, 4.6 GB in the venv; the first install took 11 minutes on
   two busy cores). With PyTorch's CPU index reachable, `PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu`
   makes it the CPU build, a few hundred MB. The venv is kept and reused while its versions match.
2. A snapshot of this working tree becomes a local git repository that stands in for GitHub, and a fake
   `google.colab` module is imported at kernel start (an IPython startup file), as on Colab.
3. papermill runs each notebook in a fresh kernel from an empty folder, as Colab's /content: its setup cell
   installs the package with pip from the snapshot (pip clones it) and imports it in the running kernel.
4. Afterwards IPython, traitlets, ipywidgets and torch must still have the versions they started with: the setup
   cell's install must not have upgraded anything under a running kernel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "colab-check"
VENV = ROOT / "build" / "colab-venv"
KEPT = ("ipython", "traitlets", "ipywidgets", "torch")


def pins(path: Path) -> dict[str, str]:
    lines = [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return {name.lower(): version for name, version in (line.split("==") for line in lines)}


def run(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], check=True, **kwargs)


def installed_versions(python: Path) -> dict[str, str]:
    """The versions of KEPT in the venv of ``python``, without a local label (torch 2.11.0+cu130 is 2.11.0)."""
    code = "import importlib.metadata as m, sys; print(*(m.version(n).split('+')[0] for n in sys.argv[1:]))"
    out = run(python, "-c", code, *KEPT, capture_output=True, text=True).stdout.split()
    return dict(zip(KEPT, out, strict=True))


def make_venv() -> Path:
    python = VENV / "bin" / "python"
    colab = pins(ROOT / "tests" / "colab_versions.txt")
    wanted = [f"{name}=={colab[name]}" for name in KEPT] + ["numpy", "matplotlib", "papermill", "ipykernel"]
    if not python.exists() or installed_versions(python) != {name: colab[name] for name in KEPT}:
        print(f"colab-check: installing {', '.join(wanted[: len(KEPT)])} into {VENV.relative_to(ROOT)}/ (once)")
        run(sys.executable, "-m", "venv", "--clear", VENV)
        run(python, "-m", "pip", "install", "--quiet", *wanted)
    return python


def snapshot(dest: Path) -> Path:
    """This working tree as a git repository, to stand in for the GitHub URL."""
    ignore = shutil.ignore_patterns(".git", ".venv", "build", "__pycache__", ".*_cache", "*.egg-info")
    shutil.copytree(ROOT, dest, ignore=ignore)
    git = ["git", "-c", "user.name=colab-check", "-c", "user.email=colab-check@example.invalid", "-C", dest]
    for args in (["init", "--quiet"], ["add", "--all"], ["commit", "--quiet", "-m", "snapshot"]):
        run(*git, *args)
    return dest


def main() -> int:
    began = time.monotonic()
    shutil.rmtree(BUILD, ignore_errors=True)
    BUILD.mkdir(parents=True)
    python = make_venv()
    # a fresh Colab runtime has no package: drop the one an earlier run's setup cells installed, which a setup cell
    # would otherwise keep (pip skips a version already installed) and run instead of this tree's
    run(python, "-m", "pip", "uninstall", "--quiet", "--yes", "attention-helpers", capture_output=True)
    before = installed_versions(python)
    print("colab-check environment:", ", ".join(f"{k} {v}" for k, v in before.items()))

    fake = BUILD / "fake_modules" / "google" / "colab"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text('"""Stands in for Colab: the setup cell only checks that it is imported."""\n')
    startup = BUILD / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-colab.py").write_text("import google.colab  # noqa: F401  (Colab's kernel imports it at start)\n")
    content = BUILD / "content"  # Colab's working folder
    content.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")},
        "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(BUILD / "fake_modules"),
        "IPYTHONDIR": str(BUILD / "ipython"),
        "SERIES_REPO_URL": snapshot(BUILD / "remote").as_uri(),
    }
    notebooks = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    for notebook in notebooks:
        start = time.monotonic()
        # papermill reads the notebook from this tree; the notebook's setup cell clones the snapshot.
        run(
            VENV / "bin" / "papermill",
            "--no-progress-bar",
            "--log-level",
            "WARNING",
            "--kernel",
            "python3",
            "--cwd",
            content,
            "--execution-timeout",
            "600",
            "--start-timeout",  # papermill's 60 s: a kernel took longer to start on two busy cores
            "600",
            notebook,
            BUILD / notebook.name,
            env=env,
        )
        print(f"{notebook.name}: ran in the Colab-like environment in {time.monotonic() - start:.0f} s")
    where = run(
        python,
        "-c",
        "import attention_helpers; print(attention_helpers.__file__)",
        capture_output=True,
        text=True,
        env=env,
        cwd=content,
    ).stdout.strip()
    after = installed_versions(python)
    if after != before:
        print(f"colab-check FAILED: the setup cell changed versions {before} -> {after}")
        return 1
    if not Path(where).resolve().is_relative_to(VENV.resolve()):
        print(f"colab-check FAILED: the package was imported from {where}, not from the Colab-like environment {VENV}")
        return 1
    print(
        f"colab-check passed: {len(notebooks)} notebooks ran with the package installed by their setup cell, and "
        f"{', '.join(f'{k} {v}' for k, v in after.items())} were left as they were "
        f"({(time.monotonic() - began) / 60:.1f} minutes in all)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
