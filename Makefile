# The README's two commands: `make lab` opens the series, `make test` checks everything.
# Every target first creates .venv and installs requirements.txt (pinned by constraints.txt) and the
# package; that happens again only when one of those files changes.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
# One notebook per lesson with its exercises' solutions: checked, refreshed and linted like the lessons.
SOLUTIONS := $(sort $(wildcard solutions/[0-9][0-9]_*.ipynb))
BUILD := build
# `make run PARAMS="-p seed 7"` overrides the notebooks' parameters cells.
PARAMS ?=
# The parameter `make test` changes, to prove every notebook runs with other values than its stored ones.
CHECK_PARAMS := -p seed 7
LAB_ARGS ?=
# Jupyter refuses to run as root unless told (containers, CI machines and some cloud shells run as root).
ROOT_ARGS := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: lab test lint unit nbval papermill-check run notebooks diagrams benchmark colab-check repo-url clean

$(STAMP): requirements.txt constraints.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed: run make PYTHON=python3.11 ...")'
	test -x $(BIN)/pip || $(PYTHON) -m venv --clear $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt -c constraints.txt -e .
	touch $(STAMP)

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/ $(ROOT_ARGS) $(LAB_ARGS)

test: lint unit nbval papermill-check

LINTED := attention_helpers tests benchmarks tools notebooks solutions

lint: $(STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)

unit: $(STAMP)
	$(BIN)/pytest tests

nbval: $(STAMP)
	$(BIN)/pytest --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider $(NOTEBOOKS) $(SOLUTIONS)

papermill-check: $(STAMP)
	@rm -rf $(BUILD)/papermill-check && mkdir -p $(BUILD)/papermill-check/notebooks $(BUILD)/papermill-check/solutions
	@for nb in $(NOTEBOOKS) $(SOLUTIONS); do \
		echo "papermill $$nb $(CHECK_PARAMS)"; \
		$(BIN)/papermill --no-progress-bar --log-level WARNING --cwd $$(dirname $$nb) --kernel python3 \
			--execution-timeout 300 $$nb $(BUILD)/papermill-check/$$nb $(CHECK_PARAMS) || exit 1; \
	done
	@$(BIN)/python tools/cell_times.py $(BUILD)/papermill-check/*/*.ipynb

run: $(STAMP)
	@rm -rf $(BUILD)/run && mkdir -p $(BUILD)/run
	@for nb in $(NOTEBOOKS); do \
		echo "papermill $$nb -> $(BUILD)/run/$$(basename $$nb) $(PARAMS)"; \
		$(BIN)/papermill --log-level WARNING --cwd notebooks --kernel python3 \
			$$nb $(BUILD)/run/$$(basename $$nb) $(PARAMS) || exit 1; \
	done
	@$(BIN)/python tools/cell_times.py $(BUILD)/run/*.ipynb

notebooks: $(STAMP)
	$(BIN)/python tools/refresh_notebooks.py $(NOTEBOOKS) $(SOLUTIONS)

diagrams: $(STAMP)
	$(BIN)/python tools/make_diagrams.py

# bench_attention_memory.py rewrites benchmarks/results/attention_memory.json, which lesson 11 plots (refresh it
# afterwards with make notebooks); one thread makes its many small operations independent of the machine's load.
benchmark: $(STAMP)
	$(BIN)/python benchmarks/bench_mha.py
	$(BIN)/python benchmarks/bench_attention_memory.py --threads 1
	$(BIN)/python benchmarks/bench_generate.py
	$(BIN)/python benchmarks/bench_generate.py --dim 384 --heads 6 --layers 6 --batch 1  # a wider model: less per-step overhead

# Not part of `make test`: every notebook in a separate venv with Colab's IPython, traitlets and ipywidgets,
# its setup cell cloning this tree as if on Colab (tools/colab_check.py). Takes several minutes.
colab-check: $(STAMP)
	$(BIN)/python tools/colab_check.py

# `make repo-url URL=https://github.com/OWNER/REPO` sets the URL in pyproject.toml and rewrites the notebooks'
# badges and setup cells and the README from it; without URL, it rewrites them from pyproject's.
repo-url:
	$(PYTHON) tools/repo_url.py $(URL)

clean:
	rm -rf $(VENV) $(BUILD) .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
