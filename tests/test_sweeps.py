"""Every threshold a training lesson asserts follows from its seed sweep (benchmarks/sweeps/, made by `make sweep`).

A claim about a trained model must hold on every seed and every CPU: each lesson that trains has a sweep table per
CPU setting (this machine's kernels and at least one older kind's), and each written threshold must lie strictly
beyond the worst figure any seed gave. A lesson whose asserts changed since its sweep fails here until the sweep
is run again.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
SWEEPS = ROOT / "benchmarks" / "sweeps"
TRAINING_LESSONS = ["08_training_a_transformer", "10_gpt_decoder", "12_encoder_decoder", "13_distributed_attention"]
MIN_SEEDS = {"native": 16}  # this CPU's own kernels; an emulated older CPU at least EMULATED_SEEDS
EMULATED_SEEDS = 8


def _sweep_tool():
    spec = importlib.util.spec_from_file_location("sweep", ROOT / "tools" / "sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tables(lesson: str) -> dict[str, dict]:
    """{setting: table} of the lesson's sweeps at the lessons' own parameters."""
    found = {}
    for path in sorted(SWEEPS.glob(f"{lesson}.*.json")):
        table = json.loads(path.read_text())
        if not table["parameters"]:
            found[table["setting"]] = table
    return found


@pytest.mark.parametrize("lesson", TRAINING_LESSONS)
def test_each_training_lesson_was_swept_natively_and_as_an_older_cpu_over_enough_seeds(lesson):
    tables = _tables(lesson)
    assert "native" in tables and len(tables) >= 2, f"{lesson}: sweeps {sorted(tables)}; run make sweep NB={lesson[:2]}"
    for setting, table in tables.items():
        least = MIN_SEEDS.get(setting, EMULATED_SEEDS)
        assert len(table["seeds"]) >= least, f"{lesson} ({setting}): {len(table['seeds'])} seeds, fewer than {least}"
        assert 123 in table["seeds"], "the stored run's seed is one of them"
        (SWEEPS / f"{lesson}.{setting}.md").read_text()  # the readable table is committed beside the numbers


@pytest.mark.parametrize("lesson", TRAINING_LESSONS)
def test_every_assert_held_on_every_seed_and_every_threshold_lies_beyond_the_worst_seed(lesson):
    """The lesson's asserts as written now, against the figures each seed gave (a threshold changed after the sweep
    counts as written); the committed table must be the one these give (make sweep ... --retable rebuilds it)."""
    sweep = _sweep_tool()
    notebook = nbformat.read(ROOT / "notebooks" / f"{lesson}.ipynb", as_version=4)
    for setting, table in _tables(lesson).items():
        assert all("records" in run for run in table["runs"]), f"{lesson} ({setting}): a seed stopped with an error"
        rows = sweep.table_rows(notebook, table["runs"])
        swept = {sweep.claim_key(row["assert"]) for row in rows}
        for key, _node in sweep.lesson_asserts(notebook):
            assert sweep.claim_key(key) in swept, f"{lesson} ({setting}): `{key}` is not in the sweep: run it again"
        for row in rows:
            where = f"{lesson} ({setting}): `{row['assert']}`, {row['figure'] or 'true or false'}"
            assert row["held"] == row["seeds"] == len(table["seeds"]), f"{where}: held on {row['held']} seeds"
            if row.get("threshold") is not None:
                assert row["margin"] > 0, f"{where}: the worst seed gave {row['min']}-{row['max']}"
        assert rows == table["rows"], f"{lesson} ({setting}): the committed table is stale: make sweep ... --retable"


def test_the_sweep_records_each_compared_figure_and_where_its_threshold_lies(tmp_path):
    """The sweep's reading of asserts, on a lesson written here: one seed, figures known in advance."""
    sweep = _sweep_tool()
    cells = [
        "import torch\nshares = torch.tensor([0.7, 0.9])\naccuracy = 0.3",
        "assert all(shares > 0.6), 'each share above 0.6'\nassert 0.2 < accuracy < 0.4\nassert accuracy != 1",
        "assert isinstance(accuracy, float)",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    namespace = {}
    path = tmp_path / "lesson.ipynb"
    nbformat.write(notebook, path)
    changed = sweep.instrumented(path, tmp_path / "records.json")
    for cell in changed.cells:
        exec(cell.source, namespace)  # the recorder cell first, the writer cell last
    runs = [{"seed": 1, "records": json.loads((tmp_path / "records.json").read_text())}]
    rows = sweep.table_rows(notebook, runs)
    by_figure = {(r["assert"], r["figure"]): r for r in rows}
    share = by_figure[("cell 1: all(shares > 0.6)", "shares (smallest)")]
    assert (share["min"], share["threshold"], share["held"]) == (pytest.approx(0.7), 0.6, 1)
    low = by_figure[("cell 1: 0.2 < accuracy < 0.4", "accuracy (smallest)")]
    high = by_figure[("cell 1: 0.2 < accuracy < 0.4", "accuracy (largest)")]
    assert (low["threshold"], high["threshold"]) == (0.2, 0.4)
    assert low["margin"] == pytest.approx(0.1) and high["margin"] == pytest.approx(0.1)
    assert by_figure[("cell 2: isinstance(accuracy, float)", None)]["held"] == 1
    # an assert that fails is recorded, not raised, and the run goes on
    namespace["accuracy"] = 0.5
    exec(changed.cells[2].source, namespace)
    assert namespace["_sweep_records"][-2] == {
        "key": "cell 1: 0.2 < accuracy < 0.4",
        "held": False,
        "operands": [0.2, 0.5, 0.4],
    }
