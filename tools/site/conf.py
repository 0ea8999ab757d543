"""Sphinx configuration of the series' website (`make site`; tools/build_site.py stages the sources).

The pages are made from the notebooks' stored outputs: nothing is executed. The repository URL comes from
pyproject.toml (the one place it is set, see tools/repo_url.py), for the Colab and repository buttons.
"""

import re
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
