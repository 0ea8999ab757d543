"""Build the series' website into a directory (`make site` -> build/site/) with Sphinx and myst-nb.

    python tools/build_site.py build/site

Nothing is executed: the pages show the notebooks' stored outputs. The sources are staged in
build/site-src/ with the repository's layout (notebooks/, solutions/), plus the landing page, index.md (the
pitch, a start button, the series' key figure and a card per lesson with the title, summary and time of the
README's lesson table; a notebook's link to the README points to it) and the table of contents: the lessons in
order, then the solutions on their own pages. Every notebook matching NN_*.ipynb is picked up.
Sphinx's configuration is tools/site/conf.py.

The staged copies, never the notebooks themselves, are adapted for the web (`for_the_site`): each solutions
page is titled "Solutions · " and its lesson's title; headings that skip a level (a solutions notebook's
"### Exercise" under its title) move up to close the gap; each figure an output shows gets alt text from the
titles its cell's code gives the plot (else from the sentence before it); the Colab badge is the site's own
image; nbval's markers (`# NBVAL_IGNORE_OUTPUT`) are left out of the code; a solution link to a cell
(`#cell-id=...`, which JupyterLab scrolls to) links to that cell's heading.
Sphinx runs with -W: any warning fails the build.
"""

from __future__ import annotations

import ast
import base64
import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = ROOT / "tools" / "site"
sys.path.insert(0, str(ROOT / "tools"))

from repo_url import read_url  # noqa: E402  (tools/ is not a package)

HEADING = re.compile(r"^(#{1,6})(\s+\S.*)$")
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
LOCAL_BADGE = "../images/colab-badge.svg"  # tools/site/colab-badge.svg, staged next to the diagrams
TITLE_CALLS = {"set_title", "suptitle", "title"}
# nbval's comment markers, for the test run, not the reader: a whole line, or the end of a line.
NBVAL_MARKER = re.compile(r"^[ \t]*# NBVAL_\w+[ \t]*\n|[ \t]*# NBVAL_\w+[ \t]*$", re.M)
# A lesson's "See the solution" link: ../solutions/NN_name.ipynb#cell-id=<the exercise heading's cell id>, the
# fragment JupyterLab scrolls to on a notebook's first opening (it does not find a heading's anchor before the
# cells are rendered). The site links to that heading's anchor instead.
CELL_LINK = re.compile(r"\]\(\.\./solutions/([0-9]{2}_\w+\.ipynb)#cell-id=([\w-]+)\)")


def pages(folder: str) -> list[Path]:
    return sorted((ROOT / folder).glob("[0-9][0-9]_*.ipynb"))


def title_of(notebook: Path) -> str:
    return notebook.stem[3:].replace("_", " ").capitalize()


# The series' key figure on the landing page: the first image a lesson's code cell stored (notebook, cell id).
KEY_FIGURE = ("notebooks/12_encoder_decoder.ipynb", "8c2ce2c7")
KEY_FIGURE_ALT = (
    "Three heatmaps of a trained encoder-decoder's cross-attention, one per date ('15 May 2000', "
    "'Friday 15 Jun 2085', '12/08/2064'): each output character of the ISO date puts its weight on the input "
    "characters of the field it comes from"
)
KEY_FIGURE_CAPTION = (
    "Lesson 12: after a minute of training on a CPU, each character the decoder writes looks at the part of the "
    "date it comes from, whatever the format. Nobody told it where to look."
)
PITCH = (
    "Fourteen Jupyter notebooks that teach attention, the idea inside every transformer, from first principles: "
    "from six word vectors and a dot product in a loop to a GPT-style decoder and an encoder-decoder you train on "
    "your own CPU. Every idea is built by hand first, then checked against PyTorch. For people who know Python and "
    "a little linear algebra; no GPU needed."
)
# A row of the README's lesson table: | [NN · Title](notebooks/NN_name.ipynb) | summary | time |
LESSON_ROW = re.compile(r"^\| \[(\d\d) · ([^\]]+)\]\(notebooks/(\d\d_\w+)\.ipynb\) \| (.+?) \| (.+?) \|$", re.M)


def lesson_cards(readme: str) -> list[dict[str, str]]:
    """Number, title, page, one-line summary and time of every lesson, from the README's lesson table."""
    keys = ("number", "title", "page", "summary", "time")
    return [dict(zip(keys, match.groups(), strict=True)) for match in LESSON_ROW.finditer(readme)]


def inline_html(markdown: str) -> str:
    """A table cell's Markdown as HTML: escaped, with `code` spans."""
    escaped = html.escape(markdown, quote=False)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def landing_page(readme: str, repository: str, lessons: list[Path], solutions: list[Path]) -> str:
    """The site's home page (not the README): the pitch, a start button, the key figure (tap to enlarge), a card
    per lesson with its title, summary and time (from the README's lesson table), and the hidden tables of
    contents: the lessons, then the solutions."""
    cards = lesson_cards(readme)
    staged = {p.stem for p in lessons}
    if {card["page"] for card in cards} != staged:
        raise SystemExit(f"the README's lesson table lists {sorted(c['page'] for c in cards)}, not {sorted(staged)}")
    first, second = cards[0], cards[1]
    lines = ["# Attention from scratch", "", f'<p class="landing-pitch">{html.escape(PITCH)}</p>', ""]
    lines += [
        '<p class="landing-start">',
        f'<a class="landing-button" href="notebooks/{first["page"]}.html">Start with lesson {first["number"]}</a>',
        f'<a class="landing-button landing-secondary" href="notebooks/{second["page"]}.html">'
        f"or go straight to lesson {second['number']}: {html.escape(second['title'])}</a>",
        "</p>",
        "",
        "```{figure} images/key_figure.png",
        f":alt: {KEY_FIGURE_ALT}",
        ":target: _images/key_figure.png",
        ":class: landing-figure",
        "",
        KEY_FIGURE_CAPTION + " (Tap the figure to enlarge it.)",
        "```",
        "",
        "## The lessons",
        "",
        '<div class="landing-cards">',
    ]
    for card in cards:
        lines += [
            f'<a class="landing-card" href="notebooks/{card["page"]}.html">',
            f'<span class="landing-card-title">{card["number"]} · {html.escape(card["title"])}</span>',
            f'<span class="landing-card-summary">{inline_html(card["summary"])}</span>',
            f'<span class="landing-card-time">{html.escape(card["time"])}</span>',
            "</a>",
        ]
    lines += ["</div>", ""]
    lines += [
        "Each time is a lesson's main path: reading it and running its cells, exercises not included. Every "
        f"lesson also opens in Colab (the rocket button at the top of its page). The code, the issues and the "
        f"license are in [the repository]({repository}).",
        "",
    ]
    toc = ["```{toctree}", ":hidden:", ":caption: Lessons", ""]
    toc += [f"notebooks/{p.stem}" for p in lessons] + ["```", ""]
    if solutions:
        toc += ["```{toctree}", ":hidden:", ":caption: Solutions", ""]
        toc += [f"solutions/{p.stem}" for p in solutions] + ["```", ""]
    return "\n".join(lines + toc)


def key_figure_png() -> bytes:
    """The PNG the key figure's cell stored."""
    notebook, cell_id = KEY_FIGURE
    for cell in json.loads((ROOT / notebook).read_text())["cells"]:
        if cell.get("id") == cell_id:
            for output in cell.get("outputs", []):
                if "image/png" in output.get("data", {}):
                    return base64.b64decode(output["data"]["image/png"])
    raise SystemExit(f"{notebook} has no cell {cell_id} with a stored figure: update KEY_FIGURE in {__file__}")


def source_of(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def markdown_lines(text: str):
    """(index, line, in a code fence) for each line of a Markdown cell."""
    fenced = False
    for index, line in enumerate(text.split("\n")):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            yield index, line, True
        else:
            yield index, line, fenced


def first_title(notebook: dict) -> str | None:
    """The text of the notebook's first level-1 heading."""
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            for _index, line, fenced in markdown_lines(source_of(cell)):
                match = HEADING.match(line)
                if match and not fenced and len(match.group(1)) == 1:
                    return match.group(2).strip()
    return None


def close_heading_gaps(cells: list[dict]) -> None:
    """Move up each heading that is more than one level below the heading it belongs under (an "### Exercise"
    right under the "# Title" becomes "## Exercise", and the "####" inside it "###")."""
    above: list[tuple[int, int]] = []  # (level in the notebook, level on the site) of the enclosing headings
    for cell in cells:
        if cell["cell_type"] != "markdown":
            continue
        lines = source_of(cell).split("\n")
        for index, line, fenced in markdown_lines(source_of(cell)):
            match = HEADING.match(line)
            if match and not fenced:
                level = len(match.group(1))
                while above and above[-1][0] >= level:
                    above.pop()
                new = above[-1][1] + 1 if above else 1
                above.append((level, new))
                lines[index] = "#" * new + match.group(2)
        cell["source"] = "\n".join(lines)


def _text(node: ast.AST, names: dict[str, str]) -> str | None:
    """The text of a string literal, an f-string (each field as "…") or a name assigned one in the cell."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "…" for v in node.values)
    if isinstance(node, ast.Name):
        return names.get(node.id)
    return None


def plot_titles(code: str) -> list[str]:
    """The titles a cell's code gives its plots, in order: `title=` arguments, `set_title`, `suptitle` and
    `plt.title` calls, and the string arguments of the package's `plot_*` functions."""
    try:
        tree = ast.parse("\n".join(line for line in code.split("\n") if not line.lstrip().startswith(("%", "!"))))
    except SyntaxError:
        return []
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            text = _text(node.value, {})
            if text is not None:
                names[node.targets[0].id] = text
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        candidates = [k.value for k in node.keywords if k.arg == "title"]
        if function in TITLE_CALLS:
            candidates += node.args[:1]
        elif function.startswith("plot_"):
            candidates += node.args[1:]
        for candidate in candidates:
            text = _text(candidate, names)
            if text and re.search(r"[A-Za-z]{2}", text.replace("…", "")):
                found.append((candidate.lineno, candidate.col_offset, " ".join(text.split())))
    titles = []
    for _line, _column, text in sorted(found):
        if text not in titles:
            titles.append(text)
    return titles


def first_sentence(markdown: str) -> str:
    """The first sentence of a Markdown cell's prose, as plain text."""
    text = " ".join(line for _index, line, fenced in markdown_lines(markdown) if not fenced and not HEADING.match(line))
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links and images: their text
    text = " ".join(re.sub(r"[`*$\\]", "", text).split())
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return (match.group(1) if match else text)[:300]


def figure_alt(code: str, context: str) -> str:
    """Alt text for the figure a code cell shows: its plots' titles, or the diagram it shows, else the sentence
    before the cell (`context`)."""
    titles = plot_titles(code)
    if titles:
        return "Plot: " + "; ".join(titles)
    diagram = re.search(r"show_diagram\(\s*['\"](\w+)['\"]", code)
    if diagram:
        return f"Diagram ({diagram.group(1).replace('_', ' ')})" + (f": {context}" if context else "")
    return f"Figure: {context}" if context else "Figure"


def heading_anchor(title: str) -> str:
    """The anchor the site (and GitHub) give a heading: "Exercise 1: A b" -> "exercise-1-a-b"."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def heading_link(match: re.Match) -> str:
    """`](../solutions/NN.ipynb#cell-id=ID)` -> `](../solutions/NN.ipynb#<anchor of that cell's first heading>)`."""
    name, cell_id = match.groups()
    for cell in json.loads((ROOT / "solutions" / name).read_text())["cells"]:
        if cell.get("id") == cell_id:
            lines = markdown_lines(source_of(cell))
            headings = [line for _index, line, fenced in lines if not fenced and HEADING.match(line)]
            if headings:
                return f"](../solutions/{name}#{heading_anchor(headings[0].lstrip('#'))})"
    raise SystemExit(f"solutions/{name} has no heading cell with id {cell_id}: a lesson's solution link is stale")


def for_the_site(notebook: dict, lesson_title: str | None = None) -> dict:
    """A copy of a notebook adapted for the site (see the module's docstring); `lesson_title` is the title of
    the lesson a solutions notebook belongs to."""
    notebook = json.loads(json.dumps(notebook))
    cells = notebook["cells"]
    close_heading_gaps(cells)
    context = ""
    for cell in cells:
        text = source_of(cell)
        if cell["cell_type"] == "markdown":
            text = text.replace("](../README.md", "](../index.md")  # the site has no README: its home page
            text = text.replace(COLAB_BADGE, LOCAL_BADGE)
            text = CELL_LINK.sub(heading_link, text)
            if lesson_title and re.search(r"^# ", text, flags=re.M):
                text = re.sub(r"^# .*$", f"# Solutions · {lesson_title}", text, count=1, flags=re.M)
                lesson_title = None
            cell["source"] = text
            context = first_sentence(text) or context
        elif cell["cell_type"] == "code":
            cell["source"] = NBVAL_MARKER.sub("", text)
        if cell["cell_type"] == "code" and any("image/png" in o.get("data", {}) for o in cell.get("outputs", [])):
            options = cell["metadata"].setdefault("mystnb", {}).setdefault("image", {})
            options.setdefault("alt", figure_alt(text, context))
    return notebook


def stage(source: Path) -> int:
    if source.exists():
        shutil.rmtree(source)
    lessons, solutions = pages("notebooks"), pages("solutions")
    for folder, notebooks in (("notebooks", lessons), ("solutions", solutions)):
        (source / folder).mkdir(parents=True, exist_ok=True)
        for path in notebooks:
            lesson = ROOT / "notebooks" / path.name  # a solutions notebook's lesson has its name
            solutions_of = folder == "solutions" and lesson.exists()
            lesson_title = first_title(json.loads(lesson.read_text())) if solutions_of else None
            notebook = for_the_site(json.loads(path.read_text()), lesson_title)
            (source / folder / path.name).write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
    shutil.copytree(ROOT / "images", source / "images")  # the diagrams
    shutil.copy2(CONF_DIR / "colab-badge.svg", source / "images" / "colab-badge.svg")
    (source / "images" / "key_figure.png").write_bytes(key_figure_png())
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
    warnings = out.parent / "site-warnings.txt"
    # -W: a warning fails the build (after all of them are listed, --keep-going); -E: no stale environment
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-E", "-W", "--keep-going", "-w", str(warnings)]
    command += ["-c", str(CONF_DIR), "-d", str(out.parent / "site-doctrees"), str(source), str(out)]
    result = subprocess.run(command, cwd=ROOT)
    warned = sum("WARNING" in line for line in warnings.read_text().splitlines()) if warnings.exists() else 0
    if result.returncode != 0:
        print(f"site: the build failed with {warned} warnings (listed above, and in {warnings})", file=sys.stderr)
        return result.returncode
    (out / ".nojekyll").touch()  # GitHub Pages would hide _static/ otherwise
    html = [p for p in out.rglob("*.html") if "_static" not in p.parts]
    print(f"site: {count} notebooks, {len(html)} pages, {warned} warnings in {out}/ (open index.html there)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
