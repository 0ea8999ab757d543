"""Structure rules for every notebook in notebooks/ (their outputs are checked by `make nbval`)."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("repo_url", ROOT / "tools" / "repo_url.py")
repo_url = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(repo_url)
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
REPO_URL = re.search(r'Repository = "([^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)


def load(path):
    return json.loads(path.read_text())


def source(cell):
    return "".join(cell["source"])


def code_cells(nb):
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def ignores_output(cell):
    """nbval's rule: a comment line that is exactly NBVAL_IGNORE_OUTPUT (nothing after it), or the tag."""
    lines = [line.strip().lstrip("#").strip() for line in source(cell).splitlines() if line.strip().startswith("#")]
    return "NBVAL_IGNORE_OUTPUT" in lines or "nbval-ignore-output" in cell["metadata"].get("tags", [])


def test_there_are_notebooks_and_their_names_are_ordered():
    assert NOTEBOOKS
    for path in NOTEBOOKS:
        assert re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", path.name), path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
class TestNotebook:
    def test_kernel_is_python3(self, path):
        assert load(path)["metadata"]["kernelspec"]["name"] == "python3"

    def test_outputs_come_from_one_clean_run(self, path):
        counts = [c["execution_count"] for c in code_cells(load(path)) if source(c).strip()]
        assert counts == list(range(1, len(counts) + 1))

    def test_no_errors_and_nothing_that_cannot_repeat(self, path):
        for cell in code_cells(load(path)):
            for output in cell["outputs"]:
                assert output["output_type"] != "error", source(cell)[:80]
                text = "".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/plain", ""))
                assert " at 0x" not in text and "grad_fn=" not in text, text[:80]
                if output["output_type"] == "execute_result":
                    assert "<Figure" not in text, "end plot cells with plt.show()"

    def test_no_absolute_paths_in_outputs(self, path):
        for cell in code_cells(load(path)):
            for output in cell["outputs"]:
                text = "".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/plain", ""))
                assert not re.search(r"(/home/|/root/|/tmp/|/Users/|/work/|[A-Z]:\\\\)", text), text[:120]

    def test_has_a_title_a_colab_badge_and_a_setup_cell(self, path):
        nb = load(path)
        first = source(nb["cells"][0])
        assert first.startswith("# ")
        badge = f"https://colab.research.google.com/github/{REPO_URL.split('github.com/')[1]}/blob/main/notebooks/{path.name}"
        assert badge in first, "the Colab badge must open this notebook from the one repository URL"
        setup = source(code_cells(nb)[0])
        assert setup == repo_url.setup_cell(REPO_URL), "every setup cell comes from tools/repo_url.py"
        assert '"google.colab" in sys.modules' in setup and f'REPO_URL = "{REPO_URL}"' in setup
        assert "%matplotlib inline" in setup and "import attention_helpers" in setup

    def test_has_a_parameters_cell_after_setup(self, path):
        cells = code_cells(load(path))
        tagged = [i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", [])]
        assert tagged == [1], "exactly one cell tagged 'parameters', right after the setup cell"
        assert cells[1]["outputs"] == []

    def test_every_parameter_is_checked_right_after_the_parameters_cell(self, path):
        """papermill and readers change parameters: a value out of range must stop the notebook at once with one
        sentence (ah.check_parameter), not fail deep in the lesson."""
        cells = code_cells(load(path))
        names = set(re.findall(r"^(\w+)\s*=", source(cells[1]), re.M))
        checked = set(re.findall(r"""check_parameter\(\s*["'](\w+)["']""", source(cells[2])))
        assert names and names <= checked, f"parameters not checked in the next cell: {sorted(names - checked)}"

    def test_few_ignored_outputs_and_no_skipped_cells(self, path):
        cells = code_cells(load(path))
        ignored = 0
        for cell in cells:
            tags = cell["metadata"].get("tags", [])
            assert "NBVAL_SKIP" not in source(cell) and "nbval-skip" not in tags
            ignored += ignores_output(cell)
        assert ignored <= 0.10 * len(cells)

    def test_ends_with_a_summary(self, path):
        last = load(path)["cells"][-1]
        assert last["cell_type"] == "markdown" and "Summary" in source(last)

    def test_diagrams_shown_exist(self, path):
        for cell in code_cells(load(path)):
            for name in re.findall(r'show_diagram\("([^"]+)"', source(cell)):
                assert (ROOT / "images" / f"{name}.png").is_file(), name

    def test_widget_cells_show_only_the_widget_and_are_checked(self, path):
        for cell in code_cells(load(path)):
            if re.search(r"ah\.\w+_widget\(", source(cell)):
                # the widget draws into its own Image, so its cell output repeats and nbval compares it
                assert not ignores_output(cell), source(cell)[:80]
                (output,) = cell["outputs"]
                assert "application/vnd.jupyter.widget-view+json" in output["data"]


LESSONS = [p for p in NOTEBOOKS if not p.name.startswith("00_")]


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_lesson_has_two_checked_exercises_each_with_a_shown_solution(path):
    """Each exercise ships unanswered and has a solution that its check accepts (both verdicts stored)."""
    cells = code_cells(load(path))
    names = {name for c in cells for name in re.findall(r'ah\.check_(?:answer|function)\(\s*"([^"]+)"', source(c))}
    printed = "".join("".join(o.get("text", "")) for c in cells for o in c["outputs"])
    assert len(names) >= 2, f"exercises found: {sorted(names)}"
    for name in names:
        assert f"{name}: Not answered yet" in printed, f"{name}: the reader's cell should ship unanswered"
        assert f"{name}: correct" in printed, f"{name}: no solution that the check accepts"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_lesson_summary_names_the_next_notebook(path):
    summary = source(load(path)["cells"][-1])
    later = [p for p in NOTEBOOKS if p.name > path.name]
    if later:
        assert later[0].name in summary, f"the summary should point to {later[0].name}"


def test_a_parameter_out_of_range_stops_the_notebook_with_one_sentence():
    """`papermill 04_causal_attention.ipynb -p short_length 7` used to fail with a bare AssertionError deep in the
    lesson; it must stop in the check cell, naming the parameter and its range."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    path = ROOT / "notebooks" / "04_causal_attention.ipynb"
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    code[1].source += "\nshort_length = 7  # what papermill -p short_length 7 injects\n"
    notebook.cells = notebook.cells[: notebook.cells.index(code[2]) + 1]
    client = NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    with pytest.raises(CellExecutionError) as info:
        client.execute()
    assert info.value.ename == "ParameterError"
    assert info.value.evalue.startswith("Parameter short_length must be from 1 to 6, got 7")
