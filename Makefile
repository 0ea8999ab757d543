# The README's two commands: `make lab` opens the series, `make test` checks everything.
# Every target first creates .venv and installs requirements.txt (pinned by constraints.txt) and the
# package; that happens again only when one of those files changes. `make test`, `make browser-check` and
# `make site` also install requirements-dev.txt (pytest-xdist, selenium, Sphinx), which learners and Colab never
# need.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
# JupyterLab reads settings overrides from its application directory inside the venv (no pop-up asking
# whether to fetch Jupyter news, no update check): tools/jupyterlab_overrides.json. The same step installs
# tools/jupyterlab_custom.css (a solutions notebook's tab says "Solutions") where the server looks for custom.css.
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.json
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
# One notebook per lesson with its exercises' solutions: checked, refreshed and linted like the lessons.
SOLUTIONS := $(sort $(wildcard solutions/[0-9][0-9]_*.ipynb))
BUILD := build
# `make run PARAMS="-p seed 7"` overrides the notebooks' parameters cells; `make run NB=10 PARAMS=...` runs
# only the notebook whose number is 10 (parameters such as num_layers belong to one lesson).
PARAMS ?=
NB ?=
RUN_NOTEBOOKS := $(if $(NB),$(sort $(wildcard notebooks/$(NB)_*.ipynb)),$(NOTEBOOKS))
# The seeds `make papermill-check` (in .ci/run) runs every notebook with, to prove that none depends on its stored
# seed (123): both are in every training lesson's seed sweep (benchmarks/sweeps/), where every claim held.
CHECK_SEEDS := 7 11
# `make sweep NB=12 SEEDS=16 CPU=AVX2`: a training lesson under SEEDS seeds, as on the CPU kind CPU (native: this one's).
SEEDS ?= 16
CPU ?= native
LAB_ARGS ?=
# Parallel workers: one per CPU core for the notebooks (pytest-xdist's `-n auto`, run_notebooks.py's `--jobs auto`),
# whose kernels keep their cores busy; one more for the unit tests and the browser check, which also wait (for the
# processes they start, for autosave, for a page to draw). `make test JOBS=1` runs everything in one process.
JOBS ?= auto
CORES := $(shell $(PYTHON) -c 'import os; print(os.cpu_count() or 1)')
WAITING_JOBS = $(if $(filter auto,$(JOBS)),$(shell expr $(CORES) + 1),$(JOBS))
# The workers share the cores: PyTorch's and MKL's threads per worker (OMP_NUM_THREADS) are the cores over the
# workers, at least one, so one each with one worker per core. More threads than cores spin waiting for one another:
# on two cores, strict nbval took 14% longer with two threads per kernel, and a cell of lesson 10 that generates
# 80 characters, 0.8 s with one thread, took 22 s with two next to two busy neighbours.
WORKER_THREADS = OMP_NUM_THREADS=$(if $(filter auto,$(JOBS)),1,$(shell $(PYTHON) -c 'print(max(1, $(CORES) // $(JOBS)))'))
# The notebooks slowest first (the training lessons have the highest numbers), so that no worker starts a long
# one last while the others wait.
SLOW_FIRST := $(shell printf '%s\n' $(NOTEBOOKS) | sort -r) $(shell printf '%s\n' $(SOLUTIONS) | sort -r)
# No cell has a wall-clock limit, which would fail a correct run on a slow or busy machine: the hang watchdog
# (tools/hang_watchdog.py) stops a cell whose kernel uses no CPU for NOTEBOOK_HANG_SECONDS (600) or more than
# NOTEBOOK_CPU_LIMIT_SECONDS (3600) of CPU, with one sentence saying what to do. For nbval it is a pytest
# plugin (tools/nbval_watchdog.py).
NBVAL := $(WORKER_THREADS) PYTHONPATH=tools $(BIN)/pytest -p nbval_watchdog -n $(JOBS) --dist loadfile --nbval \
	--nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider
# Jupyter refuses to run as root unless told (containers, CI machines and some cloud shells run as root).
ROOT_ARGS := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: help lab test lint unit unit-slow nbval nbval-portability papermill-check sweep run notebooks diagrams benchmark colab-check \
	repo-url clean browser-check site site-check

# The default target (the first one): what each command does and how long it takes on two CPU cores (a warm .venv/;
# the first command also installs, once: about 1.5 minutes with PyPI reachable and the CPU-only torch).
help:
	@echo "make lab              open the series in JupyterLab (starts in seconds once installed: the first run installs for 2-3 minutes; Ctrl-C stops it)"
	@echo "make test             lint, unit tests and every notebook compared with its stored outputs (about 4 minutes)"
	@echo "make run [NB=10] [PARAMS=\"-p seed 7\"]  run the notebooks with papermill into build/run/ (about 4 minutes, estimated; one lesson: 0.1-8 minutes)"
	@echo "make notebooks        refresh every stored output in place from a clean kernel (about 4 minutes, estimated)"
	@echo "make sweep NB=12 SEEDS=16  a training lesson under many seeds: its asserted figures' spread (2-18 minutes)"
	@echo "make site             the website into build/site/ from the stored outputs (about 1 minute)"
	@echo "make site-check       the built site in headless Chromium: links, accessibility, phone width (about 1 minute)"
	@echo "make browser-check    every notebook run and its widgets moved in JupyterLab in Chromium, then the site (about 5.5 minutes)"
	@echo "make nbval-portability  strict nbval as on older CPUs (about 3.5 minutes)"
	@echo "make colab-check      every lesson with Colab's torch, IPython and widgets (about 7.5 minutes; its first run installs 4.6 GB: + about 17)"
	@echo "make benchmark        speed and memory ratios against PyTorch's modules (several minutes)"
	@echo "make diagrams         redraw the diagrams in images/ (under a minute)"
	@echo "make repo-url URL=https://github.com/OWNER/REPO  point badges, setup cells and documents at a fork (seconds)"
	@echo "make clean            remove .venv/, build/ and caches (seconds)"
	@echo "CONTRIBUTING.md says more; .ci/run is CI's whole proof (make test, nbval-portability, site, browser-check)."

# The Python that runs everything must be 3.11 or newer: the one in an existing .venv/ (make keeps it, even one an
# older python3 made), else $(PYTHON), which makes .venv/.
NEEDS_311 := import sys; sys.exit(0 if sys.version_info >= (3, 11) else
CHECK_PYTHON := if test -x $(BIN)/python; then \
	$(BIN)/python -c '$(NEEDS_311) f"$(VENV)/ was made with Python {sys.version.split()[0]}, older than the 3.11 the series needs: remove it (rm -rf $(VENV)) and run make PYTHON=python3.11 ...")'; \
	else $(PYTHON) -c '$(NEEDS_311) f"$(PYTHON) is Python {sys.version.split()[0]}, older than the 3.11 the series needs: run make PYTHON=python3.11 ...")'; fi

# pip compiles the bytecode at install: where PYTHONDONTWRITEBYTECODE is set (this CI machine, many containers), Python
# would otherwise compile every module from source in every process, every time (the unit tests took 70 s longer).
PIP_INSTALL := $(BIN)/python -m pip install --quiet

$(STAMP): requirements.txt constraints.txt pyproject.toml
	@$(CHECK_PYTHON)
	test -x $(BIN)/pip || $(PYTHON) -m venv --clear $(VENV)
	$(PIP_INSTALL) -r requirements.txt -c constraints.txt -e .
	touch $(STAMP)

# Independent of $(STAMP): the website's build (make site, .github/workflows/pages.yml) needs no PyTorch.
$(DEV_STAMP): requirements-dev.txt constraints.txt
	@$(CHECK_PYTHON)
	test -x $(BIN)/pip || $(PYTHON) -m venv --clear $(VENV)
	$(PIP_INSTALL) -r requirements-dev.txt -c constraints.txt
	touch $(DEV_STAMP)

$(LAB_OVERRIDES): tools/jupyterlab_overrides.json tools/jupyterlab_custom.css $(STAMP)
	mkdir -p $(dir $(LAB_OVERRIDES))
	cp tools/jupyterlab_overrides.json $(LAB_OVERRIDES)
	$(BIN)/python tools/install_lab_css.py tools/jupyterlab_custom.css

# The server's root is the repository, so that every lesson's "See the solution" link opens solutions/ (a root of
# notebooks/ answers 403 there); the browser opens on the lesson list. `make lab LAB_ARGS="--port=8890
# --no-browser"` passes options to JupyterLab. It keeps the terminal while the server runs: stop it with Ctrl-C.
LAB_URL := /lab/tree/notebooks
# Kernels start with CurveZMQ transport encryption where pyzmq has it (as tools/run_notebooks.py does): without it,
# ipykernel warns "...susceptible to eavesdropping" in this terminal once per kernel.
LAB_ENCRYPTION = $(shell $(BIN)/python -c 'import zmq; print("--KernelManager.transport_encryption=auto" if zmq.has("curve") else "")')
lab: $(STAMP) $(LAB_OVERRIDES)
	$(BIN)/jupyter lab --ServerApp.root_dir=. --LabApp.default_url=$(LAB_URL) --LabApp.custom_css=True $(LAB_ENCRYPTION) $(ROOT_ARGS) $(LAB_ARGS)

# The fast loop: lint, unit tests, every notebook compared with its stored outputs. .ci/run adds the rest (the other seeds,
# the other CPUs, the site and the browser).
test: lint unit nbval

LINTED := attention_helpers tests benchmarks tools notebooks solutions

# lint-imports: the package's layers, as the import-linter contracts in pyproject.toml state them.
lint: $(STAMP) $(DEV_STAMP)  # actionlint, import-linter (requirements-dev.txt)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/lint-imports
	$(BIN)/actionlint

unit: $(STAMP) $(DEV_STAMP)  # pytest-xdist: the workers; selenium: the browser check's own tests
	$(WORKER_THREADS) $(BIN)/pytest -n $(WAITING_JOBS) tests -m "not slow"

# The tests marked slow: each runs a whole tool, install or process group end to end (tens of seconds each). .ci/run
# and GitHub's tests workflow run them; make test leaves them out to stay a loop of a few minutes.
unit-slow: $(STAMP) $(DEV_STAMP)
	$(WORKER_THREADS) $(BIN)/pytest -n $(WAITING_JOBS) tests -m slow

nbval: $(STAMP) $(DEV_STAMP)
	$(NBVAL) $(SLOW_FIRST)

# Another CPU rounds the last bits of sums differently (PyTorch's vector kernels and MKL's code path); stored outputs
# must not depend on that. tools/cpu_settings.py names the settings that emulate the other kinds of x86-64 CPU on this
# one: the newest is make browser-check's, which runs every notebook anyway and compares every output with the stored
# one as strict nbval does; strict nbval runs under the others here.
CPU_SETTINGS := $(BIN)/python tools/cpu_settings.py

nbval-portability: $(STAMP) $(DEV_STAMP)
	@browser=$$($(CPU_SETTINGS) browser | tr , ' '); \
	[ -z "$$browser" ] || echo "$$browser: make browser-check compares the stored outputs under it"; \
	for setting in $$($(CPU_SETTINGS) nbval); do \
		echo "strict nbval with $$setting" | tr , ' '; \
		env $$(echo "$$setting" | tr , ' ') $(MAKE) --no-print-directory nbval || exit 1; \
	done

# tools/run_notebooks.py is papermill with the kernel's transport encrypted (no warning per notebook), the hang
# watchdog instead of a cell timeout, and parallel workers; it skips a notebook in which no cell uses the changed
# parameter (a run that would repeat make nbval's).
papermill-check: $(STAMP)
	@rm -rf $(BUILD)/papermill-check
	@for seed in $(CHECK_SEEDS); do \
		$(WORKER_THREADS) $(BIN)/python tools/run_notebooks.py --jobs $(JOBS) --skip-unused $(BUILD)/papermill-check/seed-$$seed \
			$(SLOW_FIRST) -p seed $$seed || exit 1; \
	done
	@$(BIN)/python tools/cell_times.py $(BUILD)/papermill-check/*/*/*.ipynb

# A training lesson's claims measured over many seeds: benchmarks/sweeps/NN_name.CPU.md, the table its asserts' thresholds
# follow from (tests/test_sweeps.py). One worker per core, one thread each; about 15-25 minutes per lesson on two cores.
# RETABLE=1 runs nothing: it judges the stored figures against the lesson's thresholds as they are now.
sweep: $(STAMP)
	@test -n "$(NB)" && test -n "$(RUN_NOTEBOOKS)" || { echo "make sweep NB=12 SEEDS=16 CPU=AVX2: NB names one lesson"; exit 1; }
	OMP_NUM_THREADS=1 $(BIN)/python tools/sweep.py $(RUN_NOTEBOOKS) --seeds $(SEEDS) --cpu $(CPU) --jobs $(JOBS) $(PARAMS) \
		$(if $(RETABLE),--retable)

run: $(STAMP)
	@test -n "$(RUN_NOTEBOOKS)" || { echo "no notebook numbered $(NB) in notebooks/ (NB=10 runs notebooks/10_*.ipynb)"; exit 1; }
	@rm -rf $(BUILD)/run
	$(BIN)/python tools/run_notebooks.py $(BUILD)/run $(RUN_NOTEBOOKS) $(PARAMS)
	@$(BIN)/python tools/cell_times.py $(BUILD)/run/*/*.ipynb

notebooks: $(STAMP)
	$(BIN)/python tools/refresh_notebooks.py $(NOTEBOOKS) $(SOLUTIONS)

diagrams: $(STAMP)
	$(BIN)/python tools/make_diagrams.py

# bench_attention_ram.py rewrites attention_helpers/results/attention_ram.json, which lesson 11 plots (refresh it
# afterwards with make notebooks); one thread makes its many small operations independent of the machine's load.
benchmark: $(STAMP)
	$(BIN)/python benchmarks/bench_mha.py
	$(BIN)/python benchmarks/bench_attention_ram.py --threads 1
	$(BIN)/python benchmarks/bench_generate.py
	$(BIN)/python benchmarks/bench_generate.py --batch 1 --threads 1  # one thread each: the cache saves compute, not threads
	$(BIN)/python benchmarks/bench_generate.py --dim 384 --heads 6 --layers 6 --batch 1  # a wider model: less per-step overhead
	$(BIN)/python benchmarks/bench_ring_ram.py  # per-rank peak of ring attention at 8k tokens, 1 and 2 processes

# Not part of `make test`: every notebook in a separate venv with Colab's torch, IPython, traitlets and ipywidgets,
# its setup cell cloning this tree as if on Colab (tools/colab_check.py). 7.4 minutes measured for the 14 lessons on
# two busy cores, plus a 4.6 GB install once.
colab-check: $(STAMP)
	$(BIN)/python tools/colab_check.py

# `make repo-url URL=https://github.com/OWNER/REPO` sets the URL in pyproject.toml and rewrites the notebooks'
# badges and setup cells and the README from it; without URL, it rewrites them from pyproject's.
repo-url:
	$(PYTHON) tools/repo_url.py $(URL)

# Every lesson and solutions notebook opened in headless Chromium through JupyterLab (unchanged through autosave),
# run (outputs compared with the stored ones under another CPU's setting), its widgets moved, a solution link
# clicked; then every page of the site (build it first: make site). Needs Debian's chromium and chromium-driver.
browser-check: $(STAMP) $(DEV_STAMP) $(LAB_OVERRIDES)
	$(WORKER_THREADS) nice -n 5 $(BIN)/python tools/browser_check.py $(SLOW_FIRST) --jobs $(WAITING_JOBS) \
		--compare-under $$($(CPU_SETTINGS) browser | tr , ' ') --site $(BUILD)/site --out $(BUILD)/browser

# The static website of the series from the stored outputs (nothing is executed) into build/site/.
site: $(DEV_STAMP)
	$(BIN)/python tools/build_site.py $(BUILD)/site

# The site part of make browser-check alone (build it first: make site): links, images, console errors, axe-core's
# accessibility rules, every page at a phone's 390 px width, the maths typeset offline.
site-check: $(DEV_STAMP)
	nice -n 5 $(BIN)/python tools/browser_check.py --site $(BUILD)/site

clean:
	rm -rf $(VENV) $(BUILD) .pytest_cache .ruff_cache .import_linter_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
