"""Open every notebook in JupyterLab in headless Chromium, run it, move its widgets; then check every page of
the website (`make browser-check`).

    python tools/browser_check.py notebooks/*.ipynb solutions/*.ipynb --site build/site --out build/browser

For each notebook: JupyterLab (from this venv, on a free loopback port with a random token, rooted at the
repository as make lab is) opens it with autosave on (every AUTOSAVE_INTERVAL seconds instead of JupyterLab's
120, in the server's private settings) and waits for its kernel; each widget cell must show its stored picture
before anything runs; after an autosave tick (AUTOSAVE_WAIT) the notebook must be unchanged in the page and on disk
(stored as JupyterLab writes it). First, a notebook stored in another form proves that autosave does rewrite
it. Then autosave is turned off, all cells run, and the check fails on an error output, a code cell left
unexecuted or a JupyterLab pop-up. Each widget's controls are moved in the page (arrow key on a slider, another
entry of a menu) and the widget's image must change. In a lesson, the last "See the solution" link is clicked: its
solutions notebook must open with that exercise's heading in the upper three quarters of the view. Whatever the
page must draw gets DRAW_TIMEOUT. A screenshot per notebook goes to build/browser/; the notebook files must be
byte-identical afterwards.
Notebooks are checked --jobs at a time (make browser-check: one more than the cores, as each worker also waits for
autosave and for its page), each worker with a JupyterLab server and a browser of its own, so that one worker's
autosave setting and kernels never touch another's.

Meanwhile, in a browser of its own, every HTML page of the built site is opened from a local HTTP server: it fails
on an image that does not load, a link to a page, file or anchor of the site that does not exist, or a console
error. Images and links outside the site (cited papers) are not fetched: the check runs offline. Then each page
again, on a desktop and at a phone's 390 px (check_site_accessibility): axe-core's accessibility rules (it prints
"accessibility: N serious or critical violations", and fails unless N is 0), no page wider than the screen, every
formula typeset by the site's own MathJax, alt text on every figure. `--site build/site` without notebooks (make
site-check) runs only the site's part.

Every problem is printed under its notebook's line and, with the notebook's name, once more just above the summary
line, so that a log cut to its last lines still says what failed.

JupyterLab is started directly (its pid is the server's) in its own process group, and stopped on every
path: normal exit, failure, Ctrl-C (SIGINT) and SIGTERM.
"""

from __future__ import annotations

import argparse
import atexit
import concurrent.futures
import contextlib
import functools
import hashlib
import http.server
import json
import os
import queue
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
CHROMEDRIVER = Path("/usr/bin/chromedriver")
INSTALL_HINT = (
    "Chromium and its driver are needed: install them with "
    "`sudo apt-get update && sudo apt-get install -y chromium chromium-driver` (Debian, Ubuntu)."
)
CHROME_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
]
# JupyterLab settings for the check only (a private JUPYTER_CONFIG_DIR). Autosave as a learner has it, sooner:
# opening a notebook must not change it. The news pop-up is left to the venv's overrides.json (what make lab
# uses), so that the check tests it.
AUTOSAVE_INTERVAL = 2  # seconds (JupyterLab's default is 120)
# JupyterLab changes a notebook's metadata before its kernel reports idle; one autosave tick later it is saved
AUTOSAVE_WAIT = AUTOSAVE_INTERVAL + 2
DOCMANAGER = "@jupyterlab/docmanager-extension:plugin"
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {
        "autosave": True,
        "autosaveInterval": AUTOSAVE_INTERVAL,
    }
}
# seconds for one notebook's cells: lesson 10 trains for about a minute on two idle cores, over ten on a loaded
# machine; --timeout changes it
NOTEBOOK_TIMEOUT = 1800
# seconds for the page to draw what the check waits for: a stored picture, a widget after its control moves, the
# solution link and where it lands (on a loaded machine the page can take more than ten)
DRAW_TIMEOUT = 60

_cleanup: list = []


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cleanup(*_args) -> None:
    while _cleanup:
        action = _cleanup.pop()
        try:
            action()
        except Exception as error:  # noqa: BLE001  (cleanup must go on)
            print(f"cleanup: {error}", file=sys.stderr)


def on_signal(signum, _frame) -> None:
    run_cleanup()
    sys.exit(128 + signum)


class Lab:
    """A JupyterLab server of this venv on 127.0.0.1 with a random token, rooted at the repository."""

    def __init__(self, work: Path, kernel_env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.token = secrets.token_hex(24)
        config = work / "jupyter-config"
        for name, values in LAB_SETTINGS.items():
            path = config / "lab" / "user-settings" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(config),
            "JUPYTER_RUNTIME_DIR": str(work / "runtime"),
            "MPLBACKEND": "module://matplotlib_inline.backend_inline",
            **(kernel_env or {}),  # the kernels inherit the server's environment
        }
        args = [
            str(BIN / "jupyter-lab"),
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={self.port}",
            "--port-retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={ROOT}",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.custom_css=True",  # as make lab: tools/jupyterlab_custom.css marks the solutions' tabs
            "--KernelManager.transport_encryption=auto",  # no "running over TCP without encryption" warning
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--allow-root")
        self.log = (work / "jupyterlab.log").open("w")
        self.process = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        _cleanup.append(self.stop)
        self.wait_ready()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def api(self, path: str, method: str = "GET", data: dict | None = None, prefix: str = "api"):
        request = urllib.request.Request(
            self.url(f"{prefix}/{path}"),
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
            data=None if data is None else json.dumps(data).encode(),
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.api("status")
                return
            except OSError:
                if self.process.poll() is not None:
                    exited = f"JupyterLab exited with code {self.process.returncode}: see {self.log.name}"
                    raise SystemExit(exited) from None
                if time.monotonic() > deadline:
                    late = f"JupyterLab did not answer within {timeout:.0f} s: see {self.log.name}"
                    raise SystemExit(late) from None
                time.sleep(0.5)

    def set_autosave(self, on: bool) -> None:
        """Autosave for the pages opened from now on (a page keeps the settings it loaded)."""
        settings = {"autosave": on, "autosaveInterval": AUTOSAVE_INTERVAL}
        self.api(f"settings/{DOCMANAGER}", method="PUT", data={"raw": json.dumps(settings)}, prefix="lab/api")

    def shutdown_kernels(self) -> None:
        for session in self.api("sessions"):
            self.api(f"sessions/{session['id']}", method="DELETE")

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)  # the server and the kernels it started
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
            except ProcessLookupError:
                pass
        self.log.close()


# JavaScript run in the page. `window.jupyterapp` exists because of --LabApp.expose_app_in_browser.
JS_NOTEBOOK_STATE = """
const app = window.jupyterapp;
if (!app) return null;
const panel = app.shell.currentWidget;
if (!panel || !panel.content || !panel.sessionContext) return null;
const session = panel.sessionContext.session;
const kernel = session && session.kernel;
const cells = [];
for (const cell of panel.content.model.cells) {
  const json = cell.toJSON();
  const source = Array.isArray(json.source) ? json.source.join('') : json.source;
  cells.push({type: json.cell_type, count: json.execution_count === undefined ? null : json.execution_count,
              empty: !source.trim(), outputs: (json.outputs || []).map(o => ({type: o.output_type,
              name: o.name || null, ename: o.ename || null, evalue: o.evalue || null}))});
}
return {path: panel.context.path, ready: panel.sessionContext.isReady, kernel: kernel ? kernel.status : null,
        busy: panel.content.widgets.filter(w => w.model.type === 'code' && w.promptNode &&
                                           w.promptNode.textContent.includes('*')).length,
        cells: cells};
"""
JS_RUN_ALL = "window.jupyterapp.commands.execute('notebook:run-all-cells'); return true;"
JS_DIRTY = "const p = window.jupyterapp.shell.currentWidget; return p && p.context ? p.context.model.dirty : null;"
AUTOSAVE_COMMAND = "docmanager:toggle-autosave"
JS_AUTOSAVE_ON = f"return window.jupyterapp.commands.isToggled('{AUTOSAVE_COMMAND}');"
JS_AUTOSAVE_OFF = f"""
const done = arguments[arguments.length - 1];
const commands = window.jupyterapp.commands;
(commands.isToggled('{AUTOSAVE_COMMAND}') ? commands.execute('{AUTOSAVE_COMMAND}') : Promise.resolve())
  .then(() => done(commands.isToggled('{AUTOSAVE_COMMAND}')), e => done('error: ' + e));
"""
# Widget cells before anything runs: the stored output shows its picture (the notebook is not trusted, so
# JupyterLab renders the image/png, not the widget that needs a kernel). Their indices:
JS_WIDGET_CELLS = """
const found = [];
window.jupyterapp.shell.currentWidget.content.widgets.forEach((cell, index) => {
  const outputs = cell.model.type === 'code' ? (cell.model.toJSON().outputs || []) : [];
  if (outputs.some(o => o.data && o.data['application/vnd.jupyter.widget-view+json'])) found.push(index);
});
return found;
"""
JS_SCROLL_TO_CELL = """
const done = arguments[arguments.length - 1];
window.jupyterapp.shell.currentWidget.content.scrollToItem(arguments[0], arguments[1])
  .then(() => done(true), e => done(String(e)));
"""
JS_PICTURE_SHOWN = """
const image = window.jupyterapp.shell.currentWidget.content.widgets[arguments[0]].node
  .querySelector('.jp-OutputArea-output img');
return Boolean(image && image.complete && image.naturalWidth > 0);
"""
# The first "See the solution" link of a lesson, brought into view: [cell index, href] or null.
JS_SOLUTION_LINK = r"""
const done = arguments[arguments.length - 1];
const panel = window.jupyterapp.shell.currentWidget;
const cells = panel.content.widgets;
const index = cells.findLastIndex(c => c.model.type === 'markdown' &&
                                  c.model.sharedModel.getSource().includes('](../solutions/'));
if (index < 0) { done(null); return; }
panel.content.scrollToItem(index, 'center').then(() => setTimeout(() => {
  const link = cells[index].node.querySelector('a[href*="solutions/"]');
  if (link) link.setAttribute('data-browser-check', 'solution-link');
  done(link ? [index, cells[index].model.sharedModel.getSource().match(/\]\((\.\.\/solutions\/[^)]+)\)/)[1]]
            : 'not rendered yet');
}, 500), e => done('not rendered yet'));
"""
JS_OUTPUTS = """
return Array.from(window.jupyterapp.shell.currentWidget.content.model.cells).map(c => c.toJSON().outputs || []);
"""
# What strict nbval compares (and what it leaves out: images, widget model ids), so that a browser run can stand
# for one nbval pass under another kernel setting.
NOT_COMPARED = {"image/png", "image/jpeg", "application/vnd.jupyter.widget-view+json"}


def sanitizers() -> list[tuple[str, str]]:
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ROOT / "tests" / "nbval_sanitize.cfg")
    return [(parser[name]["regex"], parser[name]["replace"]) for name in parser.sections()]


def comparable(outputs: list, rules: list[tuple[str, str]]) -> list:
    """A cell's outputs as nbval compares them: streams joined by name, data without images and widget ids,
    every text sanitized by tests/nbval_sanitize.cfg."""
    import re

    def text(value) -> str:
        value = "".join(value) if isinstance(value, list) else value
        if not isinstance(value, str):
            value = json.dumps(value, sort_keys=True)
        for regex, replace in rules:
            value = re.sub(regex, replace, value)
        return value

    streams: dict[str, str] = {}
    others = []
    for output in outputs:
        kind = output["output_type"]
        if kind == "stream":
            streams[output["name"]] = streams.get(output["name"], "") + text(output["text"])
        elif kind in ("display_data", "execute_result"):
            others.append({k: text(v) for k, v in output["data"].items() if k not in NOT_COMPARED})
        elif kind == "error":
            others.append({"error": output["ename"]})
    return [{"stream " + name: value} for name, value in sorted(streams.items())] + others


def ignores_output(cell: dict) -> bool:
    source = "".join(cell["source"])
    comments = [line.strip().lstrip("#").strip() for line in source.splitlines() if line.strip().startswith("#")]
    return "NBVAL_IGNORE_OUTPUT" in comments or "nbval-ignore-output" in cell["metadata"].get("tags", [])


def compare_outputs(driver, notebook: Path) -> tuple[int, list[str]]:
    """(cells compared, problems): the run's outputs against the stored ones, by nbval's rules."""
    stored = json.loads(notebook.read_text())["cells"]
    live = driver.execute_script(JS_OUTPUTS)
    rules = sanitizers()
    compared, problems = 0, []
    for number, (cell, outputs) in enumerate(zip(stored, live, strict=True), start=1):
        if cell["cell_type"] != "code" or ignores_output(cell):
            continue
        compared += 1
        want, got = comparable(cell["outputs"], rules), comparable(outputs, rules)
        if want != got:
            problems.append(
                f"cell {number}: outputs differ from the stored ones: stored {want!r:.200} ran {got!r:.200}"
            )
    return compared, problems


# Where a clicked solution link landed: the open notebook and the headings in the upper share (arguments[0]) of its
# visible area, with how far down each is.
LANDING_SHARE = 0.75  # a solution link must put its heading in the upper three quarters of the notebook's view
JS_LANDED = """
const panel = window.jupyterapp.shell.currentWidget;
if (!panel || !panel.context) return null;
const view = panel.content.node.getBoundingClientRect();
// JupyterLab scrolls to a cell by the estimated heights of the cells above it; one that renders after the scroll (a
// figure) can push the heading half a screen down: it counts as there when it is in the upper part of the view
const headings = {};
const drawn = {};  // every drawn heading, in or out of the view: where the named one went when it is missing
for (const h of panel.content.node.querySelectorAll('h1, h2, h3, h4')) {
  const r = h.getBoundingClientRect();
  const text = h.textContent.replace('¶', '').trim();
  if (r.height > 0) drawn[text] = Math.round(100 * (r.top - view.top) / view.height);
  if (r.height > 0 && r.bottom > view.top + 2 && r.top < view.top + arguments[0] * view.height)
    headings[text] = drawn[text];
}
return {path: panel.context.path, headings: headings, drawn: drawn};
"""
# Scroll the open notebook to a fragment again, as following the link does (arguments[0]: '#cell-id=...')
JS_SET_FRAGMENT = """
const panel = window.jupyterapp.shell.currentWidget;
if (panel && panel.setFragment) panel.setFragment(arguments[0]);
"""
# The labels of the open documents' tabs as drawn, with what custom.css puts before them
JS_TAB_LABELS = """
return Array.from(document.querySelectorAll('#jp-main-dock-panel .lm-TabBar-tabLabel')).map(label => {
  const before = getComputedStyle(label, '::before').content;
  return (before.startsWith('"') ? JSON.parse(before) : '') + label.textContent;
});
"""
JS_TOASTS = """
return Array.from(document.querySelectorAll('.Toastify__toast, .jp-Notification-Toast'))
  .map(t => t.textContent.trim()).filter(t => t);
"""
JS_WIDGETS = """
const boxes = Array.from(document.querySelectorAll('.jp-OutputArea-output .widget-vbox'))
  .filter(box => box.querySelector(':scope > .widget-hbox') && box.querySelector(':scope > .widget-image'));
return boxes.map(box => ({
  box: box,
  controls: Array.from(box.querySelectorAll(':scope > .widget-hbox > .widget-inline-hbox')).map(c =>
    c.querySelector('select') ? 'dropdown' : (c.querySelector('.noUi-handle, .slider-handle, input[type=range]')
    ? 'slider' : 'other')),
  image: (box.querySelector(':scope > .widget-image') || {}).src || null,
}));
"""


def new_driver(chromium: str, logs: bool = False):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="browser-check-profile-")
    options.add_argument(f"--user-data-dir={profile}")
    if logs:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(120)
    driver.set_script_timeout(60)

    def quit_driver() -> None:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)

    _cleanup.append(quit_driver)
    return driver, quit_driver


def accept_leave_dialog(driver) -> None:
    with contextlib.suppress(Exception):  # no dialog: the usual case
        driver.switch_to.alert.accept()


def wait_for(predicate, timeout: float, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        time.sleep(interval)


def move_control(driver, box, index: int, kind: str) -> None:
    """Move the index-th control of a widget box as a reader would: an arrow key on a slider's handle, the
    next entry of a menu."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    control = box.find_elements(By.CSS_SELECTOR, ":scope > .widget-hbox > .widget-inline-hbox")[index]
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", control)
    if kind == "dropdown":
        select = Select(control.find_element(By.TAG_NAME, "select"))
        current = select.first_selected_option.get_attribute("value")
        values = [o.get_attribute("value") for o in select.options]
        select.select_by_value(values[(values.index(current) + 1) % len(values)])
    else:
        handle = control.find_element(By.CSS_SELECTOR, ".noUi-handle, .slider-handle, input[type=range]")
        handle.click()
        handle.send_keys(Keys.ARROW_RIGHT)


def widget_image(driver, box) -> str | None:
    return driver.execute_script(
        "const i = arguments[0].querySelector(':scope > .widget-image'); return i && i.src;", box
    )


def check_widgets(driver) -> tuple[int, int, int, list[str]]:
    """(widgets found, controls that redrew their widget, controls moved, problems)."""
    problems = []
    moved = responded = 0
    found = driver.execute_script(JS_WIDGETS)
    for number, info in enumerate(found, start=1):
        box = info["box"]
        for index, kind in enumerate(info["controls"]):
            if kind == "other":
                continue
            before = widget_image(driver, box)
            moved += 1
            try:
                move_control(driver, box, index, kind)
            except Exception as error:  # noqa: BLE001  (report it as a widget that did not respond)
                problems.append(f"widget {number}, control {index + 1} ({kind}): could not move it ({error!r})")
                continue
            if wait_for(lambda b=box, s=before: widget_image(driver, b) not in (None, s), DRAW_TIMEOUT):
                responded += 1
            else:
                problems.append(f"widget {number}, control {index + 1} ({kind}): the figure did not change")
    return len(found), responded, moved, problems


def count_widget_pictures(driver) -> tuple[int, int]:
    """(widget cells, those that show their stored picture): each cell is brought into view (a cell out of view is
    not drawn) and given DRAW_TIMEOUT to draw its image."""
    from selenium.common.exceptions import TimeoutException

    cells = driver.execute_script(JS_WIDGET_CELLS)
    pictures = 0
    for index in cells:
        with contextlib.suppress(TimeoutException):  # still scrolling: the picture's wait below decides
            driver.execute_async_script(JS_SCROLL_TO_CELL, index, "center")
        pictures += bool(wait_for(lambda i=index: driver.execute_script(JS_PICTURE_SHOWN, i), DRAW_TIMEOUT, 0.25))
    if cells:
        with contextlib.suppress(TimeoutException):
            driver.execute_async_script(JS_SCROLL_TO_CELL, 0, "start")
    return len(cells), pictures


def open_notebook(driver, lab: Lab, notebook: Path, autosave: bool) -> bool:
    """Open the notebook in a fresh workspace with autosave on or off; True once its kernel is idle."""
    relative = notebook.resolve().relative_to(ROOT).as_posix()
    lab.set_autosave(autosave)
    workspace = "check-" + notebook.parent.name + "-" + notebook.stem
    driver.get(lab.url(f"lab/workspaces/{workspace}/tree/{urllib.parse.quote(relative)}?reset&token={lab.token}"))
    accept_leave_dialog(driver)

    def opened():
        state = driver.execute_script(JS_NOTEBOOK_STATE)
        return state if state and state["path"] == relative and state["ready"] and state["kernel"] == "idle" else None

    return bool(wait_for(opened, 180))


def wait_for_autosave(driver) -> str | None:
    """Wait for an autosave tick with autosave on; a problem if autosave is off."""
    if not driver.execute_script(JS_AUTOSAVE_ON):
        return "autosave is off in the page, so the clean-after-autosave check would prove nothing"
    time.sleep(AUTOSAVE_WAIT)
    return None


def check_autosave_works(driver, lab: Lab) -> list[str]:
    """A notebook stored in another form ("Python 3") than JupyterLab's must be rewritten by autosave (within
    DRAW_TIMEOUT, as a loaded machine may take longer than a tick): otherwise the clean-after-autosave check proves
    nothing. (A notebook rewritten but not yet saved after its tick fails that check all the same: dirty in the
    page.)"""
    import nbformat

    probe_dir = ROOT / "build" / "autosave-probe"
    probe_dir.mkdir(parents=True, exist_ok=True)
    probe = probe_dir / "probe.ipynb"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Autosave probe")])
    notebook.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nbformat.write(notebook, probe)
    try:
        if not open_notebook(driver, lab, probe, autosave=True):
            return ["autosave probe: the notebook or its kernel did not start within 180 s"]
        problem = wait_for_autosave(driver)
        if problem:
            return [f"autosave probe: {problem}"]

        def saved() -> bool:
            try:
                return nbformat.read(probe, as_version=4).metadata.kernelspec.display_name != "Python 3"
            except ValueError:  # read while being written
                return False

        if not wait_for(saved, DRAW_TIMEOUT - AUTOSAVE_WAIT):
            return [f"autosave probe: a notebook JupyterLab changes was not saved within {DRAW_TIMEOUT} s"]
        return []
    finally:
        lab.shutdown_kernels()
        shutil.rmtree(probe_dir, ignore_errors=True)


def heading_of_cell(notebook: Path, cell_id: str) -> str | None:
    """The text of the first heading in the notebook's cell with this id (None if there is no such cell)."""
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell.get("id") == cell_id:
            source = "".join(cell["source"])
            return next((line.lstrip("#").strip() for line in source.splitlines() if line.startswith("#")), None)
    return None


def check_solution_link(driver, lab: Lab, notebook: Path) -> tuple[str, list[str]]:
    """Click the lesson's last "See the solution" link (its heading is not at the solution's top): (what it
    opened, problems)."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + DRAW_TIMEOUT
    while (found := driver.execute_async_script(JS_SOLUTION_LINK)) == "not rendered yet":
        if time.monotonic() > deadline:
            problem = f"the cell with the solution link was not rendered within {DRAW_TIMEOUT} s"
            return "solution link not shown", [problem]
        time.sleep(1)
    if found is None:
        return "no solution link", []
    _index, href = found
    target, _, anchor = href.partition("#")
    lesson_dir = notebook.resolve().parent.relative_to(ROOT).as_posix()
    expected = os.path.normpath(f"{lesson_dir}/{target}")  # the path JupyterLab shows, from the server's root
    heading = heading_of_cell(ROOT / expected, anchor.removeprefix("cell-id="))
    link = driver.find_element(By.CSS_SELECTOR, "a[data-browser-check='solution-link']")
    link.click()

    def heading_in_view():
        state = driver.execute_script(JS_LANDED, LANDING_SHARE)
        return state if state and state["path"] == expected and heading in state["headings"] else None

    # JupyterLab scrolls by the estimated heights of cells not drawn yet; on a loaded machine the cells drawn after
    # the scroll can carry the heading out of the view, where a learner would follow the link again: so does the check
    landed, attempts = None, 0
    while not landed and attempts < 3:
        if attempts:
            driver.execute_script(JS_SET_FRAGMENT, f"#{anchor}")
        landed = wait_for(heading_in_view, DRAW_TIMEOUT / 3)
        attempts += 1
    if landed:
        where = landed["headings"][heading]
        again = f", after {attempts - 1} more scroll(s) to the fragment" if attempts > 1 else ""
        opened = f"solution link opens {expected} at #{anchor} (heading {where}% down the view{again})"
        # the lesson and its solutions share a file name: their tabs must still read differently
        want = f"Solutions · {notebook.name}"

        def both_tabs():
            labels = driver.execute_script(JS_TAB_LABELS)
            return labels if want in labels and notebook.name in labels else None

        if not wait_for(both_tabs, 10):
            return opened, [
                f"no tabs labelled {notebook.name!r} and {want!r} (tabs: {driver.execute_script(JS_TAB_LABELS)})"
            ]
        return f"{opened}, in a tab labelled {want!r}", []
    state = driver.execute_script(JS_LANDED, LANDING_SHARE) or {}
    if state.get("path") != expected:
        return "solution link dead", [
            f"the solution link {href} did not open {expected} (the page shows {state.get('path')})"
        ]
    return f"solution link opens {expected} at the wrong place", [
        f"the solution link {href} opened {expected} without its heading ({heading!r}) in the upper "
        f"{LANDING_SHARE:.0%} of the view after {attempts} scrolls (headings there: {state.get('headings')}; the "
        f"named heading drawn at {state.get('drawn', {}).get(heading, 'no place')}% of the view): the link must name "
        "the heading cell's id"
    ]


def notebook_result(notebook: Path, start: float, **found) -> dict:
    """One notebook's line of the report: what was found, zero or empty for what was not checked."""
    counts = dict.fromkeys(("cells", "errors", "unexecuted", "widgets", "responded", "moved"), 0)
    texts = dict.fromkeys(("pictures", "compared", "clean", "solution"), "")
    name = f"{notebook.parent.name}/{notebook.name}"
    return {"name": name, "seconds": time.monotonic() - start, **counts, **texts, "problems": [], **found}


def run_finished(state: dict) -> bool:
    """Whether Run All is over: every code cell ran, or a cell stopped it with an error (JupyterLab then drops the
    queued cells, which never run: waiting for them would last the whole timeout)."""
    if state["kernel"] != "idle" or state["busy"] != 0:
        return False
    code = [c for c in state["cells"] if c["type"] == "code" and not c["empty"]]
    stopped = any(o["type"] == "error" for c in code for o in c["outputs"])
    return stopped or all(c["count"] is not None for c in code)


def check_notebook(
    driver, lab: Lab, notebook: Path, shots: Path, stored: str, timeout: float = NOTEBOOK_TIMEOUT, compare=False
) -> dict:
    start = time.monotonic()
    problems: list[str] = []
    if not open_notebook(driver, lab, notebook, autosave=True):
        return notebook_result(
            notebook, start, errors=1, problems=["the notebook or its kernel did not start within 180 s"]
        )
    widget_cells, pictures = count_widget_pictures(driver)
    if pictures < widget_cells:
        missing = f"{widget_cells - pictures} of {widget_cells}"
        problems.append(f"{missing} widget cells showed no picture before running ({DRAW_TIMEOUT} s each)")
    problem = wait_for_autosave(driver)
    dirty = driver.execute_script(JS_DIRTY)
    changed = hashlib.sha256(notebook.read_bytes()).hexdigest() != stored
    problems += [problem] if problem else []
    if dirty or changed:
        what = " and ".join(w for w, c in (("dirty in the page", dirty), ("changed on disk", changed)) if c)
        problems.append(f"opening the notebook made it {what} (git diff shows what JupyterLab rewrote)")
    clean = "clean after autosave" if not (problem or dirty or changed) else "CHANGED by opening"
    if driver.execute_async_script(JS_AUTOSAVE_OFF) is not False:  # running must not write outputs to the file
        problems.append("autosave could not be turned off before running")
        return notebook_result(notebook, start, clean=clean, problems=problems)
    driver.execute_script(JS_RUN_ALL)

    def started():  # until then the stored execution counts make the notebook look finished
        state = driver.execute_script(JS_NOTEBOOK_STATE)
        return state["busy"] > 0 or state["kernel"] != "idle"

    if not wait_for(started, 30, interval=0.1):
        problems.append("the notebook did not start running within 30 s of Run All")

    def finished():
        state = driver.execute_script(JS_NOTEBOOK_STATE)
        return state if run_finished(state) else None

    state = wait_for(finished, timeout, interval=1.0)
    if state is None:
        state = driver.execute_script(JS_NOTEBOOK_STATE)
        problems.append(f"the kernel was still busy after {timeout:.0f} s")
    code = [c for c in state["cells"] if c["type"] == "code" and not c["empty"]]
    unexecuted = []
    for number, cell in enumerate(state["cells"], start=1):
        for output in cell["outputs"]:
            if output["type"] == "error":
                problems.append(f"cell {number}: {output['ename']}: {output['evalue']}")
        if cell["type"] == "code" and not cell["empty"] and cell["count"] is None:
            unexecuted.append(number)
    errors = sum(o["type"] == "error" for c in state["cells"] for o in c["outputs"])
    if unexecuted:
        stopped = next(
            (n for n, c in enumerate(state["cells"], 1) if any(o["type"] == "error" for o in c["outputs"])), 0
        )
        after = f": Run All stopped at cell {stopped}'s error" if stopped else ""
        problems.append(f"{len(unexecuted)} code cells left unexecuted, from cell {unexecuted[0]}{after}")
    compared = ""
    if compare and state["cells"]:
        count, differences = compare_outputs(driver, notebook)
        problems += differences
        compared = f"{count - len(differences)}/{count} outputs as stored"
    for toast in driver.execute_script(JS_TOASTS):
        problems.append(f"JupyterLab showed a pop-up: {toast[:120]}")
    driver.execute_script("window.jupyterapp.shell.collapseLeft();")  # more room for the notebook
    widgets, responded, moved, widget_problems = check_widgets(driver)
    problems += widget_problems
    solution = ""
    if notebook.parent.name == "notebooks":
        solution, link_problems = check_solution_link(driver, lab, notebook)
        problems += link_problems
        driver.execute_script(  # back to the lesson for the screenshot; the solution closes unsaved
            "const app = window.jupyterapp; const w = app.shell.currentWidget;"
            "if (w && w.context && w.context.path.startsWith('solutions/')) w.dispose();"
        )
    # the screenshot shows the first widget after its controls moved, or else the notebook's top
    driver.execute_script(
        "const box = document.querySelector('.jp-OutputArea-output .widget-vbox');"
        "const cell = box ? box.closest('.jp-Cell') : document.querySelector('.jp-Cell');"
        "if (cell) cell.scrollIntoView({block: 'start'});"
    )
    time.sleep(1)
    shots.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(shots / f"{notebook.parent.name}_{notebook.stem}.png"))
    lab.shutdown_kernels()
    return notebook_result(
        notebook,
        start,
        cells=len(code),
        errors=errors,
        unexecuted=len(unexecuted),
        widgets=widgets,
        responded=responded,
        moved=moved,
        pictures=f"{pictures}/{widget_cells} widget pictures before running" if widget_cells else "",
        compared=compared,
        clean=clean,
        solution=solution,
        problems=problems,
    )


# ---------------------------------------------------------------------------------------------------- the site

JS_PAGE = """
const images = Array.from(document.images)
  .map(i => ({src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0}));
const links = Array.from(document.querySelectorAll('a[href]')).map(a => a.href);
const ids = Array.from(document.querySelectorAll('[id]')).map(e => e.id)
  .concat(Array.from(document.querySelectorAll('a[name]')).map(a => a.name));
return {images: images, links: links, ids: ids};
"""


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *_args) -> None:
        pass


def serve(directory: Path):
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(directory))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _cleanup.append(server.shutdown)
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def check_site(chromium: str, site: Path) -> tuple[int, list[str], int]:
    """(pages opened, problems, external resources not fetched)."""
    server, base = serve(site)
    driver, quit_driver = new_driver(chromium, logs=True)
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html") if "_static" not in p.parts)
    problems, external = [], set()
    ids: dict[str, set[str]] = {}
    links: list[tuple[str, str]] = []
    try:
        for page in pages:
            driver.get(base + page)
            time.sleep(0.3)
            found = driver.execute_script(JS_PAGE)
            ids[page] = set(found["ids"])
            for image in found["images"]:
                if not image["src"].startswith(base) and not image["src"].startswith("data:"):
                    external.add(image["src"])
                elif not image["ok"]:
                    problems.append(f"{page}: broken image {image['src'].removeprefix(base)}")
            links += [(page, href) for href in found["links"]]
            for entry in driver.get_log("browser"):
                message = entry.get("message", "")
                if entry.get("level") != "SEVERE":
                    continue
                source = message.split(" ")[0]
                if source.startswith(("http://", "https://")) and not source.startswith(base):
                    external.add(source)  # offline: a resource from elsewhere cannot load
                    continue
                problems.append(f"{page}: console error: {message[:200]}")
    finally:
        quit_driver()
        _cleanup.remove(quit_driver)
        server.shutdown()
        server.server_close()
        _cleanup.remove(server.shutdown)
    for page, href in links:
        if not href.startswith(base):
            continue
        target, _, anchor = href.removeprefix(base).partition("#")
        target = urllib.parse.unquote(target.split("?")[0]) or "index.html"
        if target.endswith("/"):
            target += "index.html"
        if not (site / target).is_file():
            problems.append(f"{page}: broken link to {target}")
        elif anchor and target in ids and urllib.parse.unquote(anchor) not in ids[target]:
            problems.append(f"{page}: link to a missing anchor {target}#{anchor}")
    return len(pages), sorted(set(problems)), len(external)


# ------------------------------------------------------------------------ the site: accessibility, phones, maths

PHONE_WIDTH = 390  # CSS pixels: a current phone held upright
# axe-core's rules for WCAG 2.0, 2.1 and 2.2 at levels A and AA, and its best practices; a violation counts when
# its impact is serious or critical.
AXE_OPTIONS = {
    "runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]},
    "resultTypes": ["violations"],
}
# At a phone's width the content is the same and only the layout changes: there, the rules that depend on it (axe
# takes seconds a page; all of its rules run at the desktop's width).
AXE_PHONE_OPTIONS = {
    "runOnly": {"type": "rule", "values": ["meta-viewport", "scrollable-region-focusable"]},
    "resultTypes": ["violations"],
}
SERIOUS = ("serious", "critical")
JS_AXE = """
const done = arguments[arguments.length - 1];
axe.run(document, arguments[0]).then(done, e => done({error: String(e)}));
"""
# MathJax typesets the page's \(...\) and \[...\] (the spans Sphinx marks "math") into mjx-container elements.
JS_MATHS = """
const done = arguments[arguments.length - 1];
const spans = document.querySelectorAll('.bd-article span.math, .bd-article div.math').length;
const count = () => ({spans: spans, rendered: document.querySelectorAll('.bd-article mjx-container').length,
                     loaded: typeof MathJax !== 'undefined' && !!MathJax.startup});
if (!spans) { done(count()); }
else if (typeof MathJax === 'undefined' || !MathJax.startup || !MathJax.startup.promise) {
  setTimeout(() => done(count()), 3000);
} else { MathJax.startup.promise.then(() => done(count()), () => done(count())); }
"""
# The page's own width: an element that pokes out of the viewport (and out of any scrolling box it sits in).
JS_OVERFLOW = """
const width = document.documentElement.clientWidth;
const wide = [];
for (const e of document.querySelectorAll('.bd-article *')) {
  const box = e.getBoundingClientRect();
  if (box.right <= width + 1 || box.width === 0) continue;
  let inside = false;
  for (let p = e.parentElement; p && !inside; p = p.parentElement) {
    const style = getComputedStyle(p);
    const scrolls = style.overflowX !== 'visible' && p.getBoundingClientRect().right <= width + 1;
    inside = style.position === 'fixed' || scrolls;
  }
  const what = (e.textContent || e.getAttribute('src') || '').trim().slice(0, 60);
  if (!inside) wide.push(e.tagName.toLowerCase() + ': ' + what);
}
return {viewport: width, page: document.documentElement.scrollWidth, wide: wide.slice(0, 3)};
"""
JS_ALT = """
return Array.from(document.querySelectorAll('.bd-article img')).filter(i => {
  const alt = (i.getAttribute('alt') || '').trim();
  return !alt || /\\.(png|jpe?g|svg|gif)$/i.test(alt);
}).map(i => i.getAttribute('src'));
"""


def axe_script() -> str:
    from axe_core_python.base import AXE_SCRIPT  # axe-core, packaged (requirements-dev.txt)

    return AXE_SCRIPT


def screenshot_landing(driver, base: str, shots: Path) -> list[Path]:
    """The site's home page as a visitor first sees it, on a 1280 px desktop and a 390 px phone: shots/site_*.png."""
    shots.mkdir(parents=True, exist_ok=True)
    saved = []
    for width, height, mobile in ((1280, 900, False), (PHONE_WIDTH, 844, True)):
        metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        driver.get(base + "index.html")
        driver.execute_async_script(JS_MATHS)  # drawn as it will stay
        saved.append(shots / f"site_index_{width}px.png")
        driver.save_screenshot(str(saved[-1]))
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return saved


def check_site_accessibility(
    chromium: str, site: Path, pages: list[str] | None = None, shots: Path | None = None
) -> dict:
    """Every page of a built site, on a desktop and at a phone's width (390 px): axe-core's accessibility rules,
    the page's width (nothing but its own scrolling boxes may be wider than the screen), the maths (MathJax
    from the site itself must typeset every formula: the check runs offline) and every figure's alt text.

    Returns {"pages", "violations" (serious or critical, one per rule and page), "too_wide", "maths_pages",
    "problems", "screenshots" (the home page's, when ``shots`` is a folder)}."""
    server, base = serve(site)
    driver, quit_driver = new_driver(chromium)
    pages = pages or sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html") if "_static" not in p.parts)
    script = axe_script()
    problems: list[str] = []
    violations = too_wide = maths_pages = 0
    screenshots = []
    try:
        if shots is not None:
            screenshots = screenshot_landing(driver, base, shots)
        for width, label in ((None, "desktop"), (PHONE_WIDTH, f"{PHONE_WIDTH} px")):
            if width:
                metrics = {"width": width, "height": 844, "deviceScaleFactor": 1, "mobile": True}
                driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
            for page in pages:
                driver.get(base + page)
                maths = driver.execute_async_script(JS_MATHS)
                if maths["spans"] and maths["rendered"] < maths["spans"]:
                    problems.append(
                        f"{page} ({label}): {maths['rendered']} of {maths['spans']} formulas typeset"
                        + ("" if maths["loaded"] else " (MathJax did not load)")
                    )
                elif maths["spans"] and width:
                    maths_pages += 1
                size = driver.execute_script(JS_OVERFLOW)
                if size["page"] > size["viewport"] or size["wide"]:
                    too_wide += 1
                    wide = "; ".join(size["wide"])
                    problems.append(
                        f"{page} ({label}): {size['page']} px wide in a {size['viewport']} px screen: {wide}"
                    )
                if not width:
                    for source in driver.execute_script(JS_ALT):
                        problems.append(f"{page}: a figure without alt text: {source}")
                driver.execute_script(script)
                result = driver.execute_async_script(JS_AXE, AXE_PHONE_OPTIONS if width else AXE_OPTIONS)
                if "error" in result:
                    problems.append(f"{page} ({label}): axe-core failed: {result['error']}")
                    continue
                for violation in result["violations"]:
                    if violation.get("impact") in SERIOUS:
                        violations += 1
                        nodes = violation["nodes"]
                        where = ", ".join(n["target"][0] if n["target"] else "?" for n in nodes[:3])
                        problems.append(
                            f"{page} ({label}): {violation['impact']}: {violation['id']} ({violation['help']}) "
                            f"at {len(nodes)} elements: {where}"
                        )
    finally:
        quit_driver()
        _cleanup.remove(quit_driver)
        server.shutdown()
        server.server_close()
        _cleanup.remove(server.shutdown)
    return {
        "pages": len(pages),
        "violations": violations,
        "too_wide": too_wide,
        "maths_pages": maths_pages,
        "problems": problems,
        "screenshots": screenshots,
    }


def check_whole_site(chromium: str, site: Path, shots: Path) -> tuple[list[str], bool, str]:
    """Every page of the built ``site``: (lines to print, whether anything failed, the summary's part); the home
    page's screenshots go to ``shots``."""
    if not (site / "index.html").is_file():
        return [f"no site in {site}: run make site first"], True, ""
    count, problems, external = check_site(chromium, site)
    access = check_site_accessibility(chromium, site, shots=shots)
    lines = [f"    site: {problem}" for problem in problems + access["problems"]] + [
        f"site at {PHONE_WIDTH} px: {access['too_wide']} pages wider than the screen",
        f"maths: typeset offline on {access['maths_pages']} pages",
        f"accessibility: {access['violations']} serious or critical violations",
        f"home page as a visitor sees it: {', '.join(str(p) for p in access['screenshots'])}",
    ]
    summary = f"; site: {count} pages, {len(problems)} problems ({external} external resources not fetched)"
    return lines, bool(problems or access["problems"]), summary


def digest(paths: list[Path]) -> dict[Path, str]:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def print_result(result: dict) -> None:
    """One line per notebook (time, cells, errors, widgets, what was checked), then its problems."""
    widgets = (
        f"{result['widgets']} widget{'s' if result['widgets'] > 1 else ''}: "
        f"{result['responded']}/{result['moved']} controls moved redrew them"
        if result["widgets"]
        else "no widgets"
    )
    extras = "".join(f"; {result[k]}" for k in ("pictures", "clean", "compared", "solution") if result[k])
    print(
        f"{result['name']:48} {result['seconds']:6.1f} s  {result['cells']:3d} cells  "
        f"{result['errors']} errors  {result['unexecuted']} unexecuted  {widgets}{extras}",
        flush=True,
    )
    for problem in result["problems"]:
        print(f"    {problem}", flush=True)


def recap(results: list[dict], other_problems: list[str]) -> list[str]:
    """Every problem of the notebooks' part again, each with its notebook, for the lines just above the summary:
    a CI log cut to its last lines still says what failed."""
    problems = other_problems + [f"{r['name']}: {problem}" for r in results for problem in r["problems"]]
    if not problems:
        return []
    return [f"what failed in the notebooks' part ({len(problems)}):"] + [f"    {p}" for p in problems]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--site", type=Path, help="a built site to check (make site)")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "browser", help="where screenshots go")
    parser.add_argument("--timeout", type=float, default=NOTEBOOK_TIMEOUT, help="seconds allowed per notebook")
    parser.add_argument(
        "--jobs",
        default="auto",
        help="notebooks checked at once, each worker with a JupyterLab and a browser of its own (auto: one per core)",
    )
    parser.add_argument(
        "--compare-under",
        nargs="*",
        metavar="NAME=VALUE",
        help="run the kernels with these environment settings (none: as they are) and compare every output with the "
        "stored one, as strict nbval does (make browser-check: another CPU's, from tools/cpu_settings.py)",
    )
    args = parser.parse_args(argv)
    chromium = chromium_binary()
    if chromium is None or not CHROMEDRIVER.is_file():
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    try:
        import selenium  # noqa: F401
    except ImportError:
        print("selenium is missing: run `make browser-check`, which installs requirements-dev.txt.", file=sys.stderr)
        return 2
    atexit.register(run_cleanup)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    failed = False
    results: list[dict] = []
    other_problems: list[str] = []  # the autosave probe's and files modified by the check
    before = digest(args.notebooks)
    # The site's pages are checked in a browser of their own while the notebooks run: its work fills the time
    # the notebooks' workers spend waiting for autosave and for JupyterLab to draw.
    site_pool = concurrent.futures.ThreadPoolExecutor(1)
    site_check = None if args.site is None else site_pool.submit(check_whole_site, chromium, args.site, args.out)
    site_pool.shutdown(wait=False)
    wall_start = time.monotonic()
    if args.notebooks:
        compare = args.compare_under is not None
        kernel_env = dict(setting.split("=", 1) for setting in args.compare_under or [])
        if kernel_env:
            print("kernels run with " + " ".join(args.compare_under), flush=True)
        pending: queue.SimpleQueue[Path] = queue.SimpleQueue()
        for notebook in args.notebooks:
            pending.put(notebook)
        lock = threading.Lock()  # one worker prints at a time

        def worker(index: int) -> bool:
            """Check notebooks from the queue in a JupyterLab and a browser of this worker's own (their settings,
            autosave and kernels are the worker's alone); True if anything failed."""
            work = Path(tempfile.mkdtemp(prefix=f"browser-check-{index}-"))
            _cleanup.append(lambda: shutil.rmtree(work, ignore_errors=True))
            lab = Lab(work, kernel_env)
            driver, quit_driver = new_driver(chromium)
            worker_failed = False
            try:
                if index == 0:
                    for problem in check_autosave_works(driver, lab):
                        with lock:
                            print(f"    {problem}", flush=True)
                            other_problems.append(problem)
                        worker_failed = True
                while True:
                    try:
                        notebook = pending.get_nowait()
                    except queue.Empty:
                        return worker_failed
                    result = check_notebook(
                        driver,
                        lab,
                        notebook,
                        args.out,
                        before[notebook],
                        args.timeout,
                        compare=compare,
                    )
                    with lock:
                        results.append(result)
                        print_result(result)
                    worker_failed |= bool(result["problems"])
                    accept_leave_dialog(driver)
            finally:
                quit_driver()
                _cleanup.remove(quit_driver)
                lab.stop()

        jobs = (os.cpu_count() or 1) if args.jobs == "auto" else int(args.jobs)
        jobs = max(1, min(jobs, len(args.notebooks)))
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            for outcome in [pool.submit(worker, index) for index in range(jobs)]:
                failed |= outcome.result()
        changed = [p for p, h in digest(args.notebooks).items() if h != before[p]]
        for path in changed:
            print(f"{path} was modified during the check", flush=True)
            other_problems.append(f"{path} was modified during the check")
            failed = True
    wall = time.monotonic() - wall_start
    site_summary = ""
    if site_check is not None:
        lines, site_failed, site_summary = site_check.result()
        for line in lines:
            print(line, flush=True)
        failed |= site_failed
    for line in recap(results, other_problems):
        print(line, flush=True)
    cells = sum(r["cells"] for r in results)
    errors = sum(r["errors"] for r in results)
    responded, moved = sum(r["responded"] for r in results), sum(r["moved"] for r in results)
    print(
        f"browser-check: {'FAILED' if failed else 'passed'}: {len(results)} notebooks in {wall:.0f} s, "
        f"{cells} cells, "
        f"{errors} errors, {sum(r['widgets'] for r in results)} widgets: {responded}/{moved} controls moved redrew them"
        f"{site_summary}",
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
