import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_cell_times_sums_papermill_durations(tmp_path):
    for name, durations in (("01_a.ipynb", [0.5, None, 1.25]), ("02_b.ipynb", [2.0])):
        cells = [{"metadata": {"papermill": {"duration": d}}} for d in durations] + [{"metadata": {}}]
        (tmp_path / name).write_text(json.dumps({"cells": cells}))
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "cell_times.py"), *sorted(map(str, tmp_path.glob("*.ipynb")))],
        check=True,
        capture_output=True,
        text=True,
    )
    lines = result.stdout.splitlines()
    assert "01_a.ipynb" in lines[0] and "1.8 s of cell time (slowest cell 1.2 s)" in lines[0]
    assert "02_b.ipynb" in lines[1] and "2.0 s" in lines[1]
    assert lines[2].startswith("all of ") and "3.8 s" in lines[2]  # one folder: its total is the series'
    assert lines[3].startswith("series") and "3.8 s" in lines[3]


def test_refresh_merges_consecutive_stream_chunks():
    import importlib.util

    import nbformat

    spec = importlib.util.spec_from_file_location("refresh_notebooks", ROOT / "tools" / "refresh_notebooks.py")
    refresh_notebooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(refresh_notebooks)
    merge_streams = refresh_notebooks.merge_streams

    out = nbformat.v4.new_output
    outputs = [
        out("stream", name="stdout", text="a\n"),
        out("stream", name="stdout", text="b\n"),
        out("stream", name="stderr", text="warn\n"),
        out("display_data", data={"text/plain": "x"}),
        out("stream", name="stdout", text="c\n"),
    ]
    merged = merge_streams(outputs)
    assert [(o.output_type, o.get("name"), o.get("text")) for o in merged] == [
        ("stream", "stdout", "a\nb\n"),
        ("stream", "stderr", "warn\n"),
        ("display_data", None, None),
        ("stream", "stdout", "c\n"),
    ]


def _copy_for_repo_url(tmp_path: Path) -> Path:
    """A copy of the files repo_url.py reads and writes, so that the test can change the URL."""
    import shutil

    copy = tmp_path / "repo"
    (copy / "tools").mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "repo_url.py", copy / "tools")
    shutil.copy(ROOT / "pyproject.toml", copy)
    for name in ("README.md", "CONTRIBUTING.md", "CITATION.cff"):
        shutil.copy(ROOT / name, copy)
    shutil.copytree(ROOT / "notebooks", copy / "notebooks")
    shutil.copytree(ROOT / "solutions", copy / "solutions")
    return copy


def test_repo_url_finds_the_repository_in_agreement_with_pyproject():
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "repo_url.py"), "--check"], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout


def test_repo_url_rewrites_badges_setup_cells_and_readme(tmp_path):
    copy = _copy_for_repo_url(tmp_path)
    tool = [sys.executable, str(copy / "tools" / "repo_url.py")]
    new = "https://github.com/someone-else/attention-fork"
    subprocess.run([*tool, new], check=True, capture_output=True)
    assert f'Repository = "{new}"' in (copy / "pyproject.toml").read_text()
    readme = (copy / "README.md").read_text()
    assert f"git clone {new}\ncd attention-fork\n" in readme and "attention-notebooks" not in readme
    assert "https://github.com/rasbt/LLMs-from-scratch" in readme  # a cited repository stays as it is
    assert "https://someone-else.github.io/attention-fork/" in readme and ".github.io/attention-from" not in readme
    citation = (copy / "CITATION.cff").read_text()
    assert f'repository-code: "{new}"' in citation and "https://someone-else.github.io/attention-fork/" in citation
    for path in sorted((copy / "notebooks").glob("[0-9][0-9]_*.ipynb")) + sorted(
        (copy / "solutions").glob("[0-9][0-9]_*.ipynb")
    ):
        text = path.read_text()
        assert "attention-notebooks" not in text, path.name
        cells = json.loads(text)["cells"]
        folder = path.parent.name
        assert f"colab.research.google.com/github/someone-else/attention-fork/blob/main/{folder}/{path.name}" in (
            "".join(cells[0]["source"])
        )
        setup = "".join(next(c for c in cells if c["cell_type"] == "code")["source"])
        assert f'"SERIES_REPO_URL", "{new}"' in setup and len(setup.splitlines()) <= 6
    assert subprocess.run([*tool, "--check"], capture_output=True).returncode == 0
    (copy / "pyproject.toml").write_text((copy / "pyproject.toml").read_text().replace(new, new + "2"))
    stale = subprocess.run([*tool, "--check"], capture_output=True, text=True)
    assert stale.returncode == 1 and "README.md disagrees" in stale.stdout


def test_repo_url_rejects_an_address_that_is_not_a_github_repository(tmp_path):
    copy = _copy_for_repo_url(tmp_path)
    run = subprocess.run(
        [sys.executable, str(copy / "tools" / "repo_url.py"), "https://example.com/x"], capture_output=True, text=True
    )
    assert run.returncode != 0 and "https://github.com/OWNER/REPO" in run.stderr
    assert "attention-notebooks/attention-from-scratch" in (copy / "pyproject.toml").read_text()


def _load_make_diagrams():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_diagrams", ROOT / "tools" / "make_diagrams.py")
    make_diagrams = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_diagrams)
    return make_diagrams


def _png_width(data: bytes) -> int:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big")  # the IHDR chunk starts with the width


def test_diagrams_are_up_to_date_and_legible_when_a_notebook_shrinks_them(monkeypatch):
    """Every text of every diagram is at least MIN_TEXT_PX tall in a LEGIBLE_AT_PX-wide column, and images/
    holds what the script draws now (run `make diagrams` after editing it)."""
    import io

    make_diagrams = _load_make_diagrams()
    drawn = {}

    def capture(fig, path):
        buffer = io.BytesIO()
        fig.savefig(buffer, dpi=make_diagrams.DPI, bbox_inches="tight")
        texts = list(fig.texts)  # what the diagram writes: its own texts, titles and legends (no hidden tick labels)
        for ax in fig.axes:
            legend = ax.get_legend()
            texts += [*ax.texts, ax.title, *(legend.get_texts() if legend else [])]
        texts = [t for t in texts if t.get_visible() and t.get_text().strip()]
        drawn[path.stem] = (_png_width(buffer.getvalue()), texts)
        make_diagrams.plt.close(fig)

    monkeypatch.setattr(make_diagrams, "_save", capture)
    for name, draw in make_diagrams.DIAGRAMS.items():
        draw(make_diagrams.IMAGES / f"{name}.png")
    assert set(drawn) == set(make_diagrams.DIAGRAMS)
    for name, (width, texts) in drawn.items():
        assert _png_width((make_diagrams.IMAGES / f"{name}.png").read_bytes()) == width, f"{name}: run make diagrams"
        shrink = min(1.0, make_diagrams.LEGIBLE_AT_PX / width)
        smallest = min(t.get_fontsize() for t in texts) / 72 * make_diagrams.DPI * shrink
        assert smallest >= make_diagrams.MIN_TEXT_PX, f"{name}: smallest text {smallest:.1f} px when shown {width} px"
    encoder_texts = [t.get_text() for t in drawn["encoder_layer_ln_placement"][1]]
    feed_forward_boxes = [text for text in encoder_texts if text.startswith("feed-forward")]
    assert len(feed_forward_boxes) == 2 and all("dropout" in text for text in feed_forward_boxes)  # the inner dropout


def _load_tool(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_site_url_is_the_github_pages_address_of_the_repository():
    repo_url = _load_tool("repo_url")
    assert (
        repo_url.site_url("https://github.com/Some-One/attention-fork") == "https://some-one.github.io/attention-fork/"
    )
    readme = (ROOT / "README.md").read_text()
    assert repo_url.site_url(repo_url.read_url()) in readme  # the README links to the site of its own repository


def test_run_notebooks_parses_parameters_like_papermill_and_encrypts_the_kernel_transport():
    run_notebooks = _load_tool("run_notebooks")
    assert [run_notebooks.parse_value(v) for v in ("7", "0.5", "True", "None", "abc", "1e-3")] == [
        7,
        0.5,
        True,
        None,
        "abc",
        0.001,
    ]
    config = run_notebooks.kernel_config()
    # the cause of "Kernel is running over TCP without encryption": jupyter_client's default policy, "disabled"
    assert config.KernelManager.transport_encryption == "auto"


def _make_dry_run(*args: str) -> str:
    return subprocess.run(
        ["make", "--no-print-directory", "-n", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def test_make_run_nb_runs_only_the_chosen_notebook_with_its_parameters():
    command = next(
        line
        for line in _make_dry_run("run", "NB=10", "PARAMS=-p num_layers 6").splitlines()
        if "run_notebooks.py" in line
    )
    chosen = [p.name for p in (ROOT / "notebooks").glob("10_*.ipynb")]
    assert chosen and all(name in command for name in chosen) and "-p num_layers 6" in command
    others = [p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb") if not p.name.startswith("10_")]
    assert not any(name in command for name in others)
    every = next(line for line in _make_dry_run("run").splitlines() if "run_notebooks.py" in line)
    assert all(name in every for name in others + chosen)


def test_jupyterlab_overrides_turn_the_news_pop_up_off():
    overrides = json.loads((ROOT / "tools" / "jupyterlab_overrides.json").read_text())
    settings = overrides["@jupyterlab/apputils-extension:notification"]
    assert settings == {"checkForUpdates": False, "fetchNews": "false"}  # "none" (the default) asks in a pop-up
    assert "overrides.json" in _make_dry_run("-B", ".venv/share/jupyter/lab/settings/overrides.json")


def test_the_custom_css_marks_solutions_tabs_by_the_path_jupyterlab_puts_in_a_tabs_title():
    css = (ROOT / "tools" / "jupyterlab_custom.css").read_text()
    assert '.lm-TabBar-tab[title*="solutions/"] .lm-TabBar-tabLabel::before' in css and '"Solutions · "' in css
    # the installed JupyterLab writes a document tab's title (its caption) as "Name: ...\nPath: <path>\n..."
    lab_static = Path(sys.prefix) / "share" / "jupyter" / "lab" / "static"
    assert any(r"Name: %1\nPath: %2\n" in p.read_text(errors="replace") for p in lab_static.glob("jlab_core.*.js"))
    recipe = _make_dry_run("-B", ".venv/share/jupyter/lab/settings/overrides.json")
    assert "install_lab_css.py tools/jupyterlab_custom.css" in recipe
    assert "--LabApp.custom_css=True" in _make_dry_run("lab")


def test_site_landing_page_has_a_start_button_the_key_figure_and_a_card_per_lesson_of_the_readme():
    """The site's home page is not the README: it pitches, starts, shows the key figure and a card per lesson with
    the title, summary and time of the README's lesson table; the lessons then the solutions in the contents."""
    build_site = _load_tool("build_site")
    readme = (ROOT / "README.md").read_text()
    lessons = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    solutions = [Path("solutions/01_b.ipynb")]
    page = build_site.landing_page(readme, "https://github.com/o/r", lessons, solutions)
    assert "## Getting started" not in page and "make test" not in page  # nothing for contributors
    assert f'href="notebooks/{lessons[0].stem}.html">Start with lesson 00</a>' in page
    assert "```{figure} images/key_figure.png" in page and ":alt: " in page
    for path in lessons:
        row = next(line for line in readme.splitlines() if f"(notebooks/{path.name})" in line)
        title, summary, time = (cell.strip() for cell in row.strip("|").split("|"))
        card = page.split(f'<a class="landing-card" href="notebooks/{path.stem}.html">')[1].split("</a>")[0]
        assert title.split("](")[0].lstrip("[") in card and time in card, path.name
        assert summary.split("`")[0].strip() in card, path.name
    lessons_toc, solutions_toc = page.split(":caption: Lessons")[1].split(":caption: Solutions")
    assert f"notebooks/{lessons[0].stem}\nnotebooks/{lessons[1].stem}" in lessons_toc
    assert "solutions" not in lessons_toc.split("```")[0] and "solutions/01_b" in solutions_toc
    with pytest.raises(SystemExit, match="lesson table"):  # a lesson the table forgets fails the build
        build_site.landing_page(readme, "https://github.com/o/r", [*lessons, Path("notebooks/99_new.ipynb")], [])
    assert build_site.key_figure_png().startswith(b"\x89PNG")


def test_site_code_leaves_out_nbval_markers():
    build_site = _load_tool("build_site")
    code = "# NBVAL_IGNORE_OUTPUT\nprint(torch.__version__)\nx = 1  # NBVAL_IGNORE_OUTPUT\n# a comment stays"
    site = build_site.for_the_site(_notebook(("code", code)))
    assert site["cells"][0]["source"] == "print(torch.__version__)\nx = 1\n# a comment stays"


def test_browser_check_says_how_to_install_chromium_when_it_is_missing(tmp_path):
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "browser_check.py"), "notebooks/00_setup_check.ipynb"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(tmp_path)},  # no chromium on this PATH
        timeout=60,
    )
    assert run.returncode != 0
    assert run.stderr.count("\n") == 1 and "apt-get install" in run.stderr and "chromium-driver" in run.stderr


def _chromium_available() -> bool:
    import shutil

    return bool(shutil.which("chromium")) and Path("/usr/bin/chromedriver").is_file()


@pytest.mark.skipif(not _chromium_available(), reason="needs chromium and chromium-driver (make browser-check)")
def test_site_check_finds_broken_images_links_and_anchors_and_console_errors(tmp_path):
    pytest.importorskip("selenium")
    browser_check = _load_tool("browser_check")
    (tmp_path / "index.html").write_text(
        '<html><head><link rel="icon" href="data:,"></head><body><h1 id="top">Home</h1>'
        '<img src="missing.png"><a href="other.html#there">ok</a><a href="other.html#nowhere">bad anchor</a>'
        '<a href="gone.html">gone</a><a href="#top">self</a><script>console.error("boom")</script></body></html>'
    )
    (tmp_path / "other.html").write_text(
        '<html><head><link rel="icon" href="data:,"></head><body><p id="there">x</p></body></html>'
    )
    try:
        pages, problems, _external = browser_check.check_site(browser_check.chromium_binary(), tmp_path)
    finally:
        browser_check.run_cleanup()
    assert pages == 2
    text = "\n".join(problems)
    assert "broken image missing.png" in text and "broken link to gone.html" in text
    assert "missing anchor other.html#nowhere" in text and "boom" in text
    assert "other.html#there" not in text and "#top" not in text


def _notebook(*cells: tuple[str, str], outputs: list | None = None) -> dict:
    made = []
    for kind, source in cells:
        cell = {"cell_type": kind, "metadata": {}, "source": source}
        if kind == "code":
            cell |= {"execution_count": 1, "outputs": outputs or []}
        made.append(cell)
    return {"cells": made, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


PNG_OUTPUT = {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}}


def test_site_links_a_lessons_solution_link_to_its_exercise_heading():
    """The lessons link to a solution's heading cell by id (JupyterLab scrolls there on opening); the site's page has
    no such anchor, so the site's copy links to the heading's own anchor, which every heading of the site has."""
    import re

    build_site = _load_tool("build_site")
    solutions = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
    checked = 0
    for lesson in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        if not (ROOT / "solutions" / lesson.name).is_file():
            continue
        site = build_site.for_the_site(json.loads(lesson.read_text()))
        text = "\n".join(build_site.source_of(cell) for cell in site["cells"])
        assert "cell-id=" not in text, lesson.name
        solution = json.loads((ROOT / "solutions" / lesson.name).read_text())
        headings = {  # the anchors the site gives the solutions notebook's exercise headings
            build_site.heading_anchor(m.group(1))
            for cell in solution["cells"]
            for m in re.finditer(r"^### (Exercise \d+: .+)$", build_site.source_of(cell), re.M)
        }
        for anchor in re.findall(rf"\]\(\.\./solutions/{lesson.name}#([^)]+)\)", text):
            assert anchor in headings, (lesson.name, anchor)
            checked += 1
    assert solutions and checked >= 2 * len(solutions)  # every lesson has two exercises or more
    stale = _notebook(("markdown", "Stuck? See the [solution](../solutions/04_causal_attention.ipynb#cell-id=nosuch)"))
    with pytest.raises(SystemExit, match="no heading cell with id nosuch"):
        build_site.for_the_site(stale)


def test_site_copy_of_a_solutions_notebook_has_its_lessons_title_no_heading_gaps_and_a_local_badge():
    build_site = _load_tool("build_site")
    badge = "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.x/y.ipynb)"
    original = _notebook(
        ("markdown", f"# Solutions · 08 Training\n\nSee [the README](../README.md).\n\n{badge}"),
        ("markdown", "### Exercise 1: a loop\n\n```python\n# not a heading\n```\n#### A detail"),
        ("markdown", "### Exercise 2: a matrix"),
        ("markdown", "## Summary\n\n###### Deep"),
    )
    before = json.dumps(original)
    site = build_site.for_the_site(original, lesson_title="08 · Training a transformer on a CPU")
    assert json.dumps(original) == before  # a copy: the notebook itself is left alone
    text = "\n".join(cell["source"] for cell in site["cells"])
    headings = [line for line in text.splitlines() if line.startswith("#") and not line.startswith("# not")]
    assert headings == [
        "# Solutions · 08 · Training a transformer on a CPU",
        "## Exercise 1: a loop",
        "### A detail",
        "## Exercise 2: a matrix",
        "## Summary",
        "### Deep",
    ]
    assert "# not a heading" in text  # a comment in a code block is no heading
    assert "colab.research.google.com/assets" not in text and "](../images/colab-badge.svg)" in text
    assert "](../index.md)" in text and "README" in text  # the README is the site's landing page
    lesson = build_site.for_the_site(_notebook(("markdown", "# 01 · Lesson\n\n## Part\n\n### Sub")))
    assert lesson["cells"][0]["source"] == "# 01 · Lesson\n\n## Part\n\n### Sub"  # no gaps: unchanged
    assert build_site.first_title(lesson) == "01 · Lesson"


def test_site_gives_every_figure_alt_text_from_its_plot_titles_or_the_sentence_before_it():
    build_site = _load_tool("build_site")
    code = (
        'title = f"Reversing {n} digits"\n'
        "ah.plot_history(history, title=title)\n"
        'ax.set_title("Row sums after dropout")\n'
        'ax.plot(x, y, "o-")\n'  # a format string, no title
        'ah.plot_attention_layers(w, labels, "Sort: one sequence")\n'
        'fig.suptitle(f"{label}\\n{other}")\n'  # no words: left out
    )
    assert build_site.plot_titles(code) == ["Reversing … digits", "Row sums after dropout", "Sort: one sequence"]
    assert build_site.plot_titles("%matplotlib inline\nplt.title('Loss')") == ["Loss"]
    notebook = _notebook(
        ("markdown", "## Heads\n\nThe weights of each head, as a **heat map**: rows are queries. More text."),
        ("code", "ah.plot_attention_heads(weights, ah.WORDS)\nplt.show()"),
        ("code", 'ah.show_diagram("attention_pipeline")'),
        ("code", code),
        ("code", "print(1)"),
    )
    for cell in notebook["cells"][1:4]:
        cell["outputs"] = [PNG_OUTPUT]
    alts = [
        c["metadata"].get("mystnb", {}).get("image", {}).get("alt") for c in build_site.for_the_site(notebook)["cells"]
    ]
    context = "The weights of each head, as a heat map: rows are queries."
    assert alts == [
        None,
        f"Figure: {context}",
        f"Diagram (attention pipeline): {context}",
        "Plot: Reversing … digits; Row sums after dropout; Sort: one sequence",
        None,  # no figure
    ]


def _load_site_conf():
    import importlib.util

    spec = importlib.util.spec_from_file_location("site_conf", ROOT / "tools" / "site" / "conf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_site_serves_mathjax_from_a_package_and_keeps_lessons_and_solutions_in_separate_sequences():
    pytest.importorskip("sphinx")
    conf = _load_site_conf()
    assert "://" not in conf.mathjax_path  # served by the site itself, no CDN
    assert all((conf.MATHJAX / part).exists() for part in conf.MATHJAX_PARTS)
    assert conf.mathjax_path == "mathjax/" + conf.MATHJAX_PARTS[0]

    order = ["index", "notebooks/00_a", "notebooks/12_b", "solutions/01_c", "solutions/02_d"]
    relations = {
        page: [None, *([order[i - 1]] if i else [None]), *(order[i + 1 : i + 2] or [None])]
        for i, page in enumerate(order)
    }

    class Env:
        def collect_relations(self):
            return relations

    class App:
        env = Env()
        scripts: list = []

        def add_js_file(self, name, **options):
            self.scripts.append(name)

    def links(page):
        context = {"prev": "previous page", "next": "next page"}
        conf.separate_sequences(App(), page, "page.html", context, None)
        return context["prev"], context["next"]

    assert links("index") == ("previous page", "next page")
    assert links("notebooks/00_a") == ("previous page", "next page")  # back to the landing page
    assert links("notebooks/12_b") == ("previous page", None)  # the last lesson leads nowhere
    assert links("solutions/01_c") == (None, "next page")  # the first solutions page does not lead back
    assert links("solutions/02_d") == ("previous page", "next page")
    links("search")
    assert App.scripts == ["search-snippets.js"]


def test_tests_workflow_runs_make_test_on_pushes_and_pull_requests_and_make_lint_runs_actionlint():
    workflow = (ROOT / ".github" / "workflows" / "tests.yml").read_text()
    assert "\n  push:" in workflow and "\n  pull_request:" in workflow
    assert "run: make test" in workflow and "run: make site" in workflow
    assert '"3.11"' in workflow  # the oldest Python the series supports (the Makefile's check)
    assert "actionlint" in _make_dry_run("-B", "lint")


@pytest.mark.skipif(not _chromium_available(), reason="needs chromium and chromium-driver (make browser-check)")
def test_site_accessibility_check_finds_axe_violations_wide_pages_untypeset_maths_and_missing_alt_text(tmp_path):
    pytest.importorskip("axe_core_python")
    browser_check = _load_tool("browser_check")
    head = '<html lang="en"><head><title>t</title><meta name="viewport" content="width=device-width"></head>'
    (tmp_path / "bad.html").write_text(
        f'{head}<body><main><article class="bd-article"><h1>Bad</h1><img src="_images/a.png" alt="_images/a.png">'
        '<button></button><p><span class="math">\\(x^2\\)</span></p>'
        '<p style="width: 600px">a paragraph wider than a phone</p></article></main></body></html>'
    )
    (tmp_path / "good.html").write_text(
        f'{head}<body><main><article class="bd-article"><h1>Good</h1><p>Plain text.</p>'
        '<div style="overflow-x: auto"><pre style="width: 900px">a wide line that scrolls in its own box</pre></div>'
        "</article></main></body></html>"
    )
    try:
        result = browser_check.check_site_accessibility(browser_check.chromium_binary(), tmp_path)
    finally:
        browser_check.run_cleanup()
    text = "\n".join(result["problems"])
    assert result["pages"] == 2 and "good.html" not in text
    assert "bad.html (desktop): critical: button-name" in text and result["violations"] >= 1
    assert result["too_wide"] == 1 and "bad.html (390 px): 6" in text  # too wide on a phone only, not on a desktop
    assert "0 of 1 formulas typeset (MathJax did not load)" in text
    assert "a figure without alt text: _images/a.png" in text


def _notebook_with(tmp_path: Path, *sources: str) -> Path:
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    path = tmp_path / "hang.ipynb"
    nbformat.write(notebook, path)
    return path


@pytest.mark.parametrize(
    ("cell", "hang", "cpu_limit", "stopped"),
    [
        ("import time\ntime.sleep(600)", 2, 600, "used no CPU for 2 s"),  # waits for nothing: hung
        ("while True:\n    pass", 600, 2, "used 2 s of CPU time"),  # loops
        ("import time\nend = time.process_time() + 4\nwhile time.process_time() < end:\n    pass", 2, 600, None),
    ],
    ids=["waits", "loops", "slow-but-working"],
)
def test_a_hung_cell_is_stopped_with_one_sentence_and_a_slow_one_is_not(tmp_path, cell, hang, cpu_limit, stopped):
    """No wall-clock limit: a cell working longer than the hang limit passes; a waiting or looping one stops."""
    path = _notebook_with(tmp_path, "x = 1", cell, "print('after')")
    env = {**os.environ, "NOTEBOOK_HANG_SECONDS": str(hang), "NOTEBOOK_CPU_LIMIT_SECONDS": str(cpu_limit)}
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "run_notebooks.py"), str(tmp_path / "out"), str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if stopped is None:
        assert run.returncode == 0, run.stderr
        return
    assert run.returncode == 1
    # the run ends with one sentence and no traceback (the kernel may log that it caught the interrupt)
    last = run.stderr.splitlines()[-1]
    assert f"hang.ipynb, code cell 2 (`{cell.splitlines()[0]}`)" in last and stopped in last and "make lab" in last
    assert "Traceback" not in run.stderr, run.stderr


def test_nbval_stops_a_hung_cell_with_the_same_sentence(tmp_path):
    path = _notebook_with(tmp_path, "x = 1", "import time\ntime.sleep(600)")
    env = {**os.environ, "NOTEBOOK_HANG_SECONDS": "2", "PYTHONPATH": str(ROOT / "tools")}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "nbval_watchdog", "--nbval", "-p", "no:cacheprovider", str(path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert run.returncode == 1
    assert "hang.ipynb, code cell 2 (`import time`), was stopped because it used no CPU for 2 s" in run.stdout
    assert "make lab" in run.stdout and "Traceback" not in run.stdout


def test_browser_check_compares_outputs_as_strict_nbval_does():
    """A browser run stands for one nbval pass: what nbval compares must differ, what it skips must not."""
    browser_check = _load_tool("browser_check")
    rules = browser_check.sanitizers()
    stored = [
        {"output_type": "stream", "name": "stdout", "text": ["a 0.0000\n", "b\n"]},
        {
            "output_type": "execute_result",
            "data": {"text/plain": "x", "image/png": "AAA", "application/vnd.jupyter.widget-view+json": {"id": 1}},
        },
    ]
    same = [
        {"output_type": "stream", "name": "stdout", "text": "a -0.0000\n"},  # sign of zero: sanitized
        {"output_type": "stream", "name": "stdout", "text": "b\n"},  # split differently
        {
            "output_type": "execute_result",
            "data": {"text/plain": "x", "image/png": "BBB", "application/vnd.jupyter.widget-view+json": {"id": 2}},
        },
    ]
    assert browser_check.comparable(stored, rules) == browser_check.comparable(same, rules)
    other_text = [dict(o, text="a 0.0001\nb\n") if o["output_type"] == "stream" else o for o in stored]
    assert browser_check.comparable(stored, rules) != browser_check.comparable(other_text, rules)
    stderr = [*stored, {"output_type": "stream", "name": "stderr", "text": "warning\n"}]
    assert browser_check.comparable(stored, rules) != browser_check.comparable(stderr, rules)
    assert browser_check.ignores_output({"source": "# NBVAL_IGNORE_OUTPUT\nprint(1)", "metadata": {}})
    assert not browser_check.ignores_output({"source": "# NBVAL_IGNORE_OUTPUT: why\nprint(1)", "metadata": {}})


def test_browser_check_repeats_every_problem_with_its_notebook_just_above_the_summary():
    """CI shows a failed run's last lines: they must name what failed, however early the notebook finished."""
    browser_check = _load_tool("browser_check")
    ok = browser_check.notebook_result(Path("notebooks/01_a.ipynb"), 0.0)
    bad = browser_check.notebook_result(Path("solutions/02_b.ipynb"), 0.0, problems=["cell 3: ValueError: x", "pop-up"])
    assert browser_check.recap([ok, ok], []) == []
    lines = browser_check.recap([bad, ok], ["autosave probe: not saved"])
    assert lines[0].endswith("(3):")
    assert lines[1:] == [
        "    autosave probe: not saved",
        "    solutions/02_b.ipynb: cell 3: ValueError: x",
        "    solutions/02_b.ipynb: pop-up",
    ]


def test_browser_check_stops_waiting_when_run_all_stops_at_an_error():
    """A cell that raises ends Run All: the queued cells never run, so the check must not wait for them."""
    browser_check = _load_tool("browser_check")

    def state(kernel, busy, *cells):
        return {"kernel": kernel, "busy": busy, "cells": [{"type": "code", "empty": False, **c} for c in cells]}

    ran = {"count": 1, "outputs": []}
    raised = {"count": 2, "outputs": [{"type": "error"}]}
    queued = {"count": None, "outputs": []}
    assert browser_check.run_finished(state("idle", 0, ran, raised, queued))
    assert browser_check.run_finished(state("idle", 0, ran, ran))
    assert not browser_check.run_finished(state("idle", 0, ran, queued))  # not started yet, or between cells
    assert not browser_check.run_finished(state("busy", 1, ran, raised, queued))


def test_papermill_check_skips_a_notebook_that_never_uses_the_changed_parameter(tmp_path):
    """Such a run repeats the stored run, which make nbval checks already."""
    import nbformat

    run_notebooks = _load_tool("run_notebooks")
    parameters = nbformat.v4.new_code_cell("seed = 123\nscale = 2")
    parameters.metadata["tags"] = ["parameters"]
    check = nbformat.v4.new_code_cell('ah.check_parameter("seed", seed, int)\nah.check_parameter("scale", scale)')
    for name, body, uses in (("unused", "print(scale * 3)", False), ("used", "torch.manual_seed(seed)", True)):
        notebook = nbformat.v4.new_notebook(cells=[parameters, check, nbformat.v4.new_code_cell(body)])
        nbformat.write(notebook, tmp_path / f"{name}.ipynb")
        assert run_notebooks.uses_parameters(tmp_path / f"{name}.ipynb", ["seed"]) is uses
    assert run_notebooks.uses_parameters(tmp_path / "unused.ipynb", ["seed", "scale"])
    assert "--skip-unused" in _make_dry_run("-B", "papermill-check")


def test_make_test_is_the_fast_loop_and_ci_runs_every_notebook_with_two_seeds_the_stored_runs_never_use():
    """make test: lint, unit tests, strict nbval. .ci/run adds the papermill pass under two other seeds."""
    test = _make_dry_run("-B", "test")
    assert "--nbval" in test and "pytest -n" in test and "ruff check" in test
    assert "run_notebooks.py" not in test
    assert '-m "not slow"' in test and "-m slow" in _make_dry_run("-B", "unit-slow")  # the end-to-end tests: .ci/run
    check = _make_dry_run("-B", "papermill-check")
    seeds = re.search(r"for seed in ([\d ]+);", check).group(1).split()
    stored = {re.search(r"^seed = (\d+)", cell, re.M) for cell in _parameters_cells()}
    assert len(seeds) == 2 and not {int(s) for s in seeds} & {int(m.group(1)) for m in stored if m}
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make papermill-check" in ci and "make unit-slow" in ci


def _parameters_cells() -> list[str]:
    import nbformat

    cells = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        cells += [c.source for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    return cells


@pytest.mark.parametrize(
    ("native", "browser", "nbval"),
    [
        ("AVX512", ["AVX2"], ["DEFAULT"]),
        ("AVX2", ["DEFAULT"], []),
        ("DEFAULT", [], []),
        ("ZVECTOR", [], []),  # not an x86-64 CPU: nothing to emulate
    ],
)
def test_cpu_settings_emulate_each_older_kind_of_cpu_once_with_both_libraries(native, browser, nbval):
    """make nbval runs this CPU's own kind; each older kind runs once, in the browser (the newest) or in nbval."""
    cpu_settings = _load_tool("cpu_settings")
    assert cpu_settings.settings("browser", native) == [cpu_settings.CPUS[kind] for kind in browser]
    assert cpu_settings.settings("nbval", native) == [cpu_settings.CPUS[kind] for kind in nbval]
    for kind, setting in cpu_settings.CPUS.items():  # a CPU has both libraries' code paths of its own kind
        names = dict(pair.split("=") for pair in setting.split(","))
        assert names["ATEN_CPU_CAPABILITY"].upper() == kind and names["MKL_CBWR"] in (kind, "COMPATIBLE")


def test_make_runs_the_cpu_settings_in_nbval_portability_and_the_browser_check():
    commands = _make_dry_run("-B", "nbval-portability", "browser-check")
    assert commands.count("tools/cpu_settings.py nbval") == 1
    assert commands.count("tools/cpu_settings.py browser") == 2  # the browser's, and the line saying so
    assert "--compare-under $(" in commands.replace("$$(", "$(")


def test_notebooks_run_one_worker_per_core_the_waiting_checks_one_more_and_the_workers_share_the_cores():
    """Notebook kernels keep their cores busy; unit tests and browser workers also wait, so they get one more. Each
    worker's PyTorch gets its share of the cores: more threads than cores spin waiting for one another."""
    cores = os.cpu_count() or 1
    commands = _make_dry_run("-B", "unit", "nbval", "papermill-check", "browser-check").splitlines()

    def line(tool):
        return next(c for c in commands if tool in c).lstrip()

    assert f"pytest -n {cores + 1} tests" in line("pytest -n")
    assert "-n auto " in line("--nbval") and "--jobs auto" in line("run_notebooks.py")
    assert f"--jobs {cores + 1}" in line("browser_check.py")
    assert "pytest -n 1 tests" in _make_dry_run("-B", "unit", "JOBS=1")
    # The workers share the cores: one thread each, every core for one process.
    for tool in ("pytest -n", "--nbval", "run_notebooks.py", "browser_check.py"):
        assert line(tool).startswith("OMP_NUM_THREADS=1 "), line(tool)
    for jobs, threads in ((1, cores), (2 * cores, 1)):
        unit = next(c for c in _make_dry_run("-B", "unit", f"JOBS={jobs}").splitlines() if "pytest -n" in c)
        assert unit.startswith(f"OMP_NUM_THREADS={threads} "), unit
