"""pytest plugin for `make nbval`: the hang watchdog (tools/hang_watchdog.py) instead of wall-clock limits.

    PYTHONPATH=tools pytest -p nbval_watchdog --nbval ... notebooks/*.ipynb

nbval limits each cell by the clock (`--nbval-cell-timeout`, 2000 s) and waits 5 s for a cell's last output
message after its reply; on a busy machine either can fail a correct run. This plugin lifts both and watches
each cell's kernel instead: a cell that waits or loops is stopped, and its failure is one sentence saying
which cell and what to do.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hang_watchdog import CellWatchdog

HERE = str(Path(__file__).resolve().parent)
# pytest needed tools/ on its path to load this plugin; the notebooks' kernels (which inherit the environment)
# do not
_paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in _paths if p and Path(p).resolve() != Path(HERE))

NO_CLOCK_LIMIT = 7 * 24 * 3600  # seconds: nbval needs a number
OUTPUT_WAIT = 600  # seconds for a cell's last output message after its reply (nbval: 5)


def pytest_configure(config) -> None:
    if hasattr(config.option, "nbval_cell_timeout"):
        config.option.nbval_cell_timeout = NO_CLOCK_LIMIT


def is_notebook_cell(item) -> bool:
    return type(item).__name__ == "IPyNbCell"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    kernel = getattr(item.parent, "kernel", None) if is_notebook_cell(item) else None
    pid = getattr(getattr(getattr(kernel, "km", None), "provisioner", None), "pid", None)
    if pid is None:
        yield
        return
    item.output_timeout = OUTPUT_WAIT
    watchdog = CellWatchdog(item.parent.nodeid)
    watchdog.start(pid, item.cell_num + 1, item.cell.source)  # nbval counts code cells from 0
    try:
        yield
    finally:
        watchdog.stop()
        if watchdog.reason is not None:
            item.watchdog_sentence = watchdog.sentence()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    sentence = getattr(item, "watchdog_sentence", None)
    if sentence and report.when == "call" and report.failed:
        report.longrepr = sentence
