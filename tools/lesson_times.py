"""How long each lesson's main path takes a learner: reading time plus the time its cells run.

    python tools/lesson_times.py build/run/notebooks/*.ipynb

Reads papermill's output notebooks (`make run` writes them to build/run/notebooks/). The main path is every cell
before the first `## Exercise` heading (as tests/test_notebooks.py defines it). Reading time: its Markdown at
READING_WPM words a minute and its code at CODE_WPM (code is read more slowly); run time: papermill's per-cell
durations of those cells. The total is rounded up to a multiple of 5 minutes, the figure the README and the site
show (CONTRIBUTING.md explains the method).
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

READING_WPM = 200
CODE_WPM = 100
EXERCISES_HEADING = re.compile(r"^## Exercise", re.M)


def source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def main_path(cells: list[dict]) -> list[dict]:
    for index, cell in enumerate(cells):
        if cell["cell_type"] == "markdown" and EXERCISES_HEADING.search(source(cell)):
            return cells[:index]
    return cells  # lesson 00 has no exercises


def lesson_minutes(notebook: dict) -> tuple[float, float, int]:
    """(reading minutes, running minutes, the total rounded up to 5 minutes) of a notebook's main path."""
    cells = main_path(notebook["cells"])
    prose = sum(len(source(c).split()) for c in cells if c["cell_type"] == "markdown")
    code = sum(len(source(c).split()) for c in cells if c["cell_type"] == "code")
    reading = prose / READING_WPM + code / CODE_WPM
    running = sum(c["metadata"].get("papermill", {}).get("duration") or 0.0 for c in cells) / 60
    return reading, running, 5 * math.ceil((reading + running) / 5)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        reading, running, total = lesson_minutes(json.loads(Path(name).read_text()))
        print(f"{Path(name).name:45} reading {reading:5.1f} min, running {running:5.1f} min: about {total} min")
