"""Sphinx configuration of the series' website (`make site`; tools/build_site.py stages the sources).

The pages are made from the notebooks' stored outputs: nothing is executed. The repository URL comes from
pyproject.toml (the one place it is set, see tools/repo_url.py), for the Colab and repository buttons.
"""

import importlib.util
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = re.search(r'^Repository = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)

project = "Attention from scratch"
author = "the series' authors"
copyright = "the series' authors"
extensions = ["myst_nb"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# Stored outputs only: a page shows what the notebook showed after its clean run.
nb_execution_mode = "off"
nb_merge_streams = True
# A widget needs a live kernel; the page shows the widget's one-line text form instead (the lesson draws the
# same figure as a plain image next to it), and loads no widget JavaScript from a CDN.
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]
nb_ipywidgets_js = {}
myst_heading_anchors = 3
myst_enable_extensions = ["dollarmath"]
suppress_warnings = ["misc.highlighting_failure"]

html_theme = "sphinx_book_theme"
html_title = project
html_theme_options = {
    "repository_url": REPOSITORY,
    "repository_branch": "main",
    "path_to_docs": "",  # the staged sources keep the repository's layout: notebooks/, solutions/
    "use_repository_button": True,
    "launch_buttons": {"colab_url": "https://colab.research.google.com"},
    "show_navbar_depth": 1,
    "home_page_in_toc": True,
}
html_favicon = "favicon.svg"  # browsers ask for one; without it every page logs a 404
html_context = {"default_mode": "light"}  # without a mode, the theme logs an error on a first visit

# ------------------------------------------------------------------------------------- offline maths, narrow screens

# Maths without a CDN: MathJax 3 ships in the sphinx-mathjax-offline package (requirements-dev.txt). The site
# serves its combined TeX-to-HTML script and what that script loads on demand (TeX extensions, fonts, the
# accessibility menu's speech rules) from _static/mathjax/.
_MATHJAX_PACKAGE = importlib.util.find_spec("sphinx-mathjax-offline")
if _MATHJAX_PACKAGE is None:
    raise ImportError("sphinx-mathjax-offline is missing: build the site with make site (requirements-dev.txt)")
MATHJAX = Path(_MATHJAX_PACKAGE.origin).parent / "static" / "mathjax"
MATHJAX_PARTS = ["tex-chtml.js", "a11y", "input", "output/chtml", "sre", "ui"]
mathjax_path = "mathjax/tex-chtml.js"  # relative: Sphinx serves it from _static/

# tools/site/static/: site.css (long inline code wraps, every figure fits the column, the landing page's cards),
# figure-zoom.js (a figure shrunk to fit links to its full size) and search-snippets.js (search results quote the
# page's article, not the theme's buttons around it).
html_static_path = ["static"]
html_css_files = ["site.css"]
html_js_files = [("figure-zoom.js", {"defer": "defer"})]


def copy_mathjax(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "mathjax"
    for part in MATHJAX_PARTS:
        source = MATHJAX / part
        if source.is_dir():
            shutil.copytree(source, target / part, dirs_exist_ok=True)
        else:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / part)


def folder(docname: str | None) -> str:
    return docname.rpartition("/")[0] if docname else ""


def separate_sequences(app, pagename, templatename, context, doctree) -> None:
    """Previous/next links stay among the lessons or among the solutions: the last lesson does not lead into
    the solutions, nor the first solution back into the lessons (the landing page still leads to lesson 00)."""
    if pagename == "search":
        app.add_js_file("search-snippets.js", loading_method="defer")  # this page only
    if folder(pagename) not in ("notebooks", "solutions"):
        return
    _parent, previous, following = app.env.collect_relations().get(pagename, (None, None, None))
    if previous and folder(previous) not in ("", folder(pagename)):
        context["prev"] = None
    if following and folder(following) != folder(pagename):
        context["next"] = None


def setup(app):
    app.connect("html-page-context", separate_sequences)
    app.connect("build-finished", copy_mathjax)
