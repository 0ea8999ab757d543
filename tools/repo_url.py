"""The repository URL lives in one place, pyproject.toml's [project.urls]; this tool writes it everywhere else.

    python tools/repo_url.py https://github.com/OWNER/REPO   # set the URL (make repo-url URL=...)
    python tools/repo_url.py                                  # rewrite from the URL pyproject already has
    python tools/repo_url.py --check                          # exit 1 and list what disagrees

It rewrites each notebook's Open-in-Colab badge and its whole setup cell (the first code cell, generated from
SETUP_CELL below, so that every notebook shares one setup cell), the README's clone commands, its links to the
repository's issues and to the website (and the same addresses in CONTRIBUTING.md and CITATION.cff). GitHub Pages
derives the website's address from the repository's (https://OWNER.github.io/REPO/; the site's own Colab and
repository buttons read pyproject.toml when it is built). Notebooks in notebooks/ and solutions/ are rewritten.
Standard library only: it runs before any virtual environment exists.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
README = ROOT / "README.md"
# Other files that name the repository or its website (no clone command).
OTHER_DOCUMENTS = (ROOT / "CONTRIBUTING.md", ROOT / "CITATION.cff")
URL_LINE = re.compile(r'^Repository = "([^"]*)"$', re.M)
GITHUB_URL = re.compile(r"^https://github\.com/([\w.-]+)/([\w.-]+?)/?$")
SITE_URL = re.compile(r"https://[\w-]+\.github\.io/[\w.-]+/")
# GitHub repositories the README and lessons cite that are not this series: never rewritten.
EXTERNAL_REPOSITORIES = ("https://github.com/rasbt/LLMs-from-scratch",)

# Six lines, the same in every notebook: on Colab (where nothing is installed yet) pip fetches the package from the
# repository; IPython prints a `_render_traceback_` in place of a traceback, so a failure reads as one sentence
# under pip's own reason. Locally `make lab` has installed everything and the `if` does nothing. Notebooks are
# linted without E401/I001 so that the imports fit on one line; `{url}` is the one placeholder.
SETUP_CELL = """\
import os, sys, matplotlib.pyplot as plt, torch  # Setup: on Colab, install the package (a minute); `make lab` did it.

REPO_URL = os.environ.get("SERIES_REPO_URL", "{url}")
if "google.colab" in sys.modules and os.system(f"{sys.executable} -m pip install -q git+{REPO_URL}"):
    raise type("SetupError", (OSError,), {"_render_traceback_": lambda e: e.args})("Setup failed: run this cell again.")
import attention_helpers as ah"""


def read_url() -> str:
    match = URL_LINE.search(PYPROJECT.read_text())
    if not match:
        raise SystemExit('pyproject.toml has no line `Repository = "https://github.com/OWNER/REPO"`')
    return match.group(1)


def parts(url: str) -> tuple[str, str]:
    match = GITHUB_URL.match(url)
    if not match:
        raise SystemExit(f"expected https://github.com/OWNER/REPO, got {url!r}")
    return match.group(1), match.group(2)


def site_url(url: str) -> str:
    """The GitHub Pages address of the repository's website (.github/workflows/pages.yml publishes it)."""
    owner, name = parts(url)
    return f"https://{owner.lower()}.github.io/{name}/"


def setup_cell(url: str) -> str:
    parts(url)
    return SETUP_CELL.replace("{url}", url)


def badge(url: str, notebook: str, folder: str = "notebooks") -> str:
    owner, name = parts(url)
    return (
        "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        f"(https://colab.research.google.com/github/{owner}/{name}/blob/main/{folder}/{notebook})"
    )


def dump_notebook(notebook: dict) -> str:
    """The bytes nbformat writes: sorted keys, one-space indent, UTF-8 left as it is, a final newline."""
    return json.dumps(notebook, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def as_source(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def rewrite_notebook(path: Path, url: str, require_badge: bool = True) -> str:
    notebook = json.loads(path.read_text())
    title = notebook["cells"][0]
    text = re.sub(
        r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)",
        lambda _: badge(url, path.name, path.parent.name),
        "".join(title["source"]),
    )
    if require_badge and badge(url, path.name, path.parent.name) not in text:
        raise SystemExit(f"{path.name}: the first cell has no Open In Colab badge to rewrite")
    title["source"] = as_source(text)
    setup = next(cell for cell in notebook["cells"] if cell["cell_type"] == "code")
    setup["source"] = as_source(setup_cell(url))
    return dump_notebook(notebook)


def rewrite_readme(text: str, url: str) -> str:
    name = parts(url)[1]
    text = re.sub(
        r"https://github\.com/[\w.-]+/[\w.-]+", lambda m: m[0] if m[0] in EXTERNAL_REPOSITORIES else url, text
    )
    text = SITE_URL.sub(lambda _: site_url(url), text)
    return re.sub(r"^cd [\w.-]+$", f"cd {name}", text, count=1, flags=re.M)


def expected_files(url: str) -> dict[Path, str]:
    files = {README: rewrite_readme(README.read_text(), url)}
    files |= {path: rewrite_readme(path.read_text(), url) for path in OTHER_DOCUMENTS}
    for folder in ("notebooks", "solutions"):  # a lesson must have a badge; a solutions notebook may
        for path in sorted((ROOT / folder).glob("[0-9][0-9]_*.ipynb")):
            files[path] = rewrite_notebook(path, url, require_badge=folder == "notebooks")
    return files


def main(argv: list[str]) -> int:
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    if args:
        if check:
            raise SystemExit("give either a URL or --check")
        parts(args[0])
        PYPROJECT.write_text(URL_LINE.sub(f'Repository = "{args[0]}"', PYPROJECT.read_text()))
    url = read_url()
    stale = [path for path, text in expected_files(url).items() if path.read_text() != text]
    if check:
        for path in stale:
            print(f"{path.relative_to(ROOT)} disagrees with the repository URL {url}: run make repo-url URL={url}")
        return 1 if stale else 0
    for path, text in expected_files(url).items():
        if path in stale:
            path.write_text(text)
            print(f"rewrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
