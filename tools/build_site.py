"""Build the series' website into a directory (`make site` -> build/site/) with Sphinx and myst-nb.

    python tools/build_site.py build/site

Nothing is executed: the pages show the notebooks' stored outputs. The sources are staged in
build/site-src/ with the repository's layout (notebooks/, solutions/), plus an index.md made from the README
(its relative links to files that are not pages point to the repository instead; a notebook's link to
the README points to it) and the table of contents:
the lessons in order, then the solutions on their own pages. Every notebook matching NN_*.ipynb is picked up.
Sphinx's configuration is tools/site/conf.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = ROOT / "tools" / "site"
sys.path.insert(0, str(ROOT / "tools"))

from repo_url import read_url  # noqa: E402  (tools/ is not a package)

MARKDOWN_LINK = re.compile(r"(\[[^\]]*\]\()([^)\s]+)(\))")


def pages(folder: str) -> list[Path]:
    return sorted((ROOT / folder).glob("[0-9][0-9]_*.ipynb"))


def title_of(notebook: Path) -> str:
    return notebook.stem[3:].replace("_", " ").capitalize()


def landing_page(readme: str, repository: str, lessons: list[Path], solutions: list[Path]) -> str:
    """The README with links to non-page files sent to the repository, and the hidden tables of contents."""
    staged = {f"notebooks/{p.name}" for p in lessons} | {f"solutions/{p.name}" for p in solutions}

    def relink(match: re.Match) -> str:
        target = match.group(2)
        path = target.split("#")[0]
        if re.match(r"^[a-z]+:", target) or target.startswith("#") or path in staged:
            return match.group(0)
        kind = "tree" if (ROOT / path).is_dir() else "blob"
        return f"{match.group(1)}{repository}/{kind}/main/{target}{match.group(3)}"

    text = MARKDOWN_LINK.sub(relink, readme)
    toc = ["", "```{toctree}", ":hidden:", ":caption: Lessons", ""]
    toc += [f"notebooks/{p.stem}" for p in lessons] + ["```", ""]
    if solutions:
        toc += ["```{toctree}", ":hidden:", ":caption: Solutions", ""]
        toc += [f"solutions/{p.stem}" for p in solutions] + ["```", ""]
    return text.rstrip("\n") + "\n" + "\n".join(toc)


def stage(source: Path) -> int:
    if source.exists():
        shutil.rmtree(source)
    lessons, solutions = pages("notebooks"), pages("solutions")
    for folder, notebooks in (("notebooks", lessons), ("solutions", solutions)):
        (source / folder).mkdir(parents=True, exist_ok=True)
        for path in notebooks:
            # the README is the landing page, index.md, on the site
            text = path.read_text().replace("](../README.md", "](../index.md")
            (source / folder / path.name).write_text(text)
    # the diagrams are package data (attention_helpers/viz/images/); the site serves them at images/
    shutil.copytree(ROOT / "attention_helpers" / "viz" / "images", source / "images")
    readme = (ROOT / "README.md").read_text()
    (source / "index.md").write_text(landing_page(readme, read_url(), lessons, solutions))
    return len(lessons) + len(solutions)


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else ROOT / "build" / "site"
    out = out if out.is_absolute() else ROOT / out
    source = out.parent / "site-src"
    count = stage(source)
    if out.exists():
        shutil.rmtree(out)
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-c", str(CONF_DIR), "-d"]
    command += [str(out.parent / "site-doctrees"), str(source), str(out)]
    result = subprocess.run(command, cwd=ROOT)
    if result.returncode != 0:
        return result.returncode
    (out / ".nojekyll").touch()  # GitHub Pages would hide _static/ otherwise
    html = [p for p in out.rglob("*.html") if "_static" not in p.parts]
    print(f"site: {count} notebooks, {len(html)} pages in {out}/ (open index.html there)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
