"""Structure rules for every notebook in notebooks/ and solutions/ (their outputs are checked by `make nbval`)."""

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
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
REPO_URL = re.search(r'Repository = "([^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)


# Set once per notebook, in the cell that checks the parameters (the six-line setup cell has no room for it).
PRINT_OPTIONS = "torch.set_printoptions(precision=4, sci_mode=False)"


def load(path):
    return json.loads(path.read_text())


def source(cell):
    return "".join(cell["source"])


def code_cells(nb):
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def has_no_parameters(cell):
    """A parameters cell with nothing to set (a notebook where nothing is random or sized) holds only a comment
    saying so: a parameter that changes nothing would mislead whoever sets it."""
    lines = [line.strip() for line in source(cell).splitlines() if line.strip()]
    return bool(lines) and all(line.startswith("#") for line in lines)


def ignores_output(cell):
    """nbval's rule: a comment line that is exactly NBVAL_IGNORE_OUTPUT (nothing after it), or the tag."""
    lines = [line.strip().lstrip("#").strip() for line in source(cell).splitlines() if line.strip().startswith("#")]
    return "NBVAL_IGNORE_OUTPUT" in lines or "nbval-ignore-output" in cell["metadata"].get("tags", [])


def test_there_are_notebooks_and_their_names_are_ordered():
    assert NOTEBOOKS
    for path in NOTEBOOKS + SOLUTIONS:
        assert re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", path.name), path.name


def test_the_whole_series_was_stored_by_one_python():
    versions = {load(path)["metadata"]["language_info"]["version"] for path in NOTEBOOKS + SOLUTIONS}
    assert len(versions) == 1, f"notebooks stored by several Python versions {sorted(versions)}: run make notebooks"


def test_every_solutions_notebook_belongs_to_a_lesson():
    lessons = {path.name for path in NOTEBOOKS}
    for path in SOLUTIONS:
        assert path.name in lessons, f"solutions/{path.name} has no lesson notebooks/{path.name}"


def first_heading(path):
    return next(
        line
        for c in load(path)["cells"]
        if c["cell_type"] == "markdown"
        for line in source(c).splitlines()
        if line.startswith("# ")
    )


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_a_solutions_notebook_is_titled_solutions_and_its_lessons_title(path):
    """A lesson and its solutions share a file name (JupyterLab's and Colab's tab label): the title, which the
    table of contents, GitHub and the site show, tells them apart, the same way in every notebook."""
    lesson_title = first_heading(ROOT / "notebooks" / path.name)
    assert first_heading(path) == f"# Solutions · {lesson_title[2:]}"


def notebook_id(path):
    return f"{path.parent.name}/{path.name}"


@pytest.mark.parametrize("path", NOTEBOOKS + SOLUTIONS, ids=notebook_id)
class TestNotebook:
    def test_kernel_metadata_is_stored_as_jupyterlab_writes_it(self, path):
        """JupyterLab writes the kernel's spec and language_info into a notebook it opens: stored in any other
        form, the notebook turns dirty and autosave rewrites it (tools/notebook_metadata.py fixes it)."""
        from ipykernel.ipkernel import IPythonKernel
        from jupyter_client.kernelspec import get_kernel_spec

        metadata = load(path)["metadata"]
        spec = get_kernel_spec("python3")  # this environment's kernel, the one nbval and JupyterLab start
        assert metadata["kernelspec"] == {"display_name": spec.display_name, "language": "python", "name": "python3"}
        expected = dict(IPythonKernel.language_info)
        stored = dict(metadata["language_info"])
        # the Python version of the kernel that refreshed the notebooks: one for the whole series
        assert re.fullmatch(r"3\.\d+\.\d+", stored.pop("version")) and expected.pop("version")
        assert stored == expected

    def test_every_nbval_marker_is_one_nbval_reads(self, path):
        """nbval reads a marker only when the comment is the marker alone: `# NBVAL_IGNORE_OUTPUT: why` is ignored
        by nbval, and its cell silently compared. No NBVAL_SKIP either: a cell that fails must be fixed."""
        for cell in code_cells(load(path)):
            for line in source(cell).splitlines():
                comment = line.strip().lstrip("#").strip()
                if line.strip().startswith("#") and "NBVAL" in comment:
                    assert comment in ("NBVAL_IGNORE_OUTPUT", "NBVAL_CHECK_OUTPUT", "NBVAL_RAISES_EXCEPTION"), line

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
        folder = path.parent.name  # notebooks/ or solutions/
        badge = f"https://colab.research.google.com/github/{REPO_URL.split('github.com/')[1]}/blob/main/{folder}/{path.name}"
        assert badge in first, "the Colab badge must open this notebook from the one repository URL"
        setup = source(code_cells(nb)[0])
        assert setup == repo_url.setup_cell(REPO_URL), "every setup cell comes from tools/repo_url.py"
        assert '"google.colab" in sys.modules' in setup and f'"{REPO_URL}"' in setup
        assert "import attention_helpers as ah" in setup
        assert len(setup.splitlines()) <= 6, "the setup cell is the first code a learner reads: at most 6 lines"

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
        assert names or has_no_parameters(cells[1]), "an empty parameters cell says why in a comment"
        assert names <= checked, f"parameters not checked in the next cell: {sorted(names - checked)}"
        assert PRINT_OPTIONS in source(cells[2]), f"the cell after the parameters sets {PRINT_OPTIONS}"

    def test_few_ignored_outputs_and_no_skipped_cells(self, path):
        cells = code_cells(load(path))
        ignored = 0
        for cell in cells:
            tags = cell["metadata"].get("tags", [])
            assert "NBVAL_SKIP" not in source(cell) and "nbval-skip" not in tags
            ignored += ignores_output(cell)
        assert ignored <= 0.10 * len(cells)

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
                # the first view as a picture, for viewers without a kernel (GitHub, Colab, the website)
                assert output["data"].get("image/png", "").startswith("iVBORw0KGgo"), source(cell)[:80]


LESSONS = [p for p in NOTEBOOKS if not p.name.startswith("00_")]
EXERCISE_HEADING = re.compile(r"^### Exercise (\d+): (.+?)\s*$", re.M)
STUCK_LINK = re.compile(r"Stuck\? See the \[solution\]\(\.\./solutions/([^)#]+)#([^)]+)\)")
NOT_ANSWERED = "Exercise {n}: Not answered yet (the answer is still None).\n"


def headings(nb, level="## "):
    """[(cell index, heading line)] of a notebook's Markdown headings of one level."""
    return [
        (i, line)
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "markdown"
        for line in source(c).splitlines()
        if line.startswith(level)
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_has_a_summary_and_ends_in_markdown(path):
    """Every notebook has a `## Summary`; lessons 01-07 put it right after the exercises, before `## Going further`
    (a reader who stops at the exercises still gets the recap), the others at the end."""
    nb = load(path)
    assert nb["cells"][-1]["cell_type"] == "markdown"
    assert [line for _, line in headings(nb) if line.startswith("## Summary")] == ["## Summary"], "one Summary"


def stored_text(cell):
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o["output_type"] == "stream")


def exercises(nb):
    """{N: (heading title, the cells from its heading to the next heading of level 1-3)} of a notebook."""
    found, current = {}, None
    for cell in nb["cells"]:
        text = source(cell)
        if cell["cell_type"] == "markdown" and re.search(r"^#{1,3} ", text, re.M):
            match = EXERCISE_HEADING.search(text)
            current = int(match.group(1)) if match else None
            if match:
                assert current not in found, f"two headings for exercise {current}"
                found[current] = (match.group(2), [])
                continue
        if current is not None:
            found[current][1].append(cell)
    return found


def check_cells(n, cells):
    """The code cells of exercise n's section that call its check, checks.exercise_n(...)."""
    return [c for c in cells if c["cell_type"] == "code" and re.search(rf"\bexercise_{n}\(", source(c))]


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_lesson_exercises_ship_unanswered_with_a_link_to_their_solution(path):
    """Two exercises or more, numbered 1, 2, ...; each check cell's stored output says only "Not answered yet", and
    a "Stuck?" line links to the exercise's heading in solutions/<the lesson's name>."""
    found = exercises(load(path))
    assert len(found) >= 2, f"exercises found: {sorted(found)}"
    assert sorted(found) == list(range(1, len(found) + 1)), f"exercises are numbered {sorted(found)}"
    solution = ROOT / "solutions" / path.name
    assert solution.is_file(), f"no solutions/{path.name}"
    solution_titles = {n: title for n, (title, _) in exercises(load(solution)).items()}
    solution_cells = {  # exercise number -> the id of the solution's cell with its heading
        int(m.group(1)): c["id"] for c in load(solution)["cells"] if (m := EXERCISE_HEADING.search(source(c)))
    }
    for n, (title, cells) in found.items():
        checks = check_cells(n, cells)
        assert checks, f"exercise {n}: no cell calls its check (checks.exercise_{n}(answer))"
        for cell in checks:
            assert stored_text(cell) == NOT_ANSWERED.format(n=n), f"exercise {n} should ship unanswered"
        links = [m for c in cells if c["cell_type"] == "markdown" for m in STUCK_LINK.findall(source(c))]
        assert links, f"exercise {n}: no 'Stuck? See the [solution](../solutions/...)' line"
        for target, anchor in links:
            assert target == path.name, f"exercise {n} links to solutions/{target}, expected solutions/{path.name}"
            # JupyterLab scrolls a notebook it opens to #cell-id=... (a heading's anchor is not found before the
            # cells render); the site turns the link into one to the heading (tools/build_site.py)
            assert anchor == f"cell-id={solution_cells[n]}", f"exercise {n}: #{anchor} is not its heading's cell"
        assert solution_titles.get(n) == title, f"solutions/{path.name} lacks the heading of exercise {n}"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_lesson_gives_no_answer_away(path):
    """GitHub and Colab show every cell: no hint or verdict in the stored outputs, no hidden (solution) cells."""
    for cell in load(path)["cells"]:
        assert not cell["metadata"].get("jupyter", {}).get("source_hidden"), source(cell)[:80]
        if cell["cell_type"] == "code":
            for output in cell["outputs"]:
                text = "".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/plain", ""))
                assert "Hint:" not in text and ": correct" not in text, text[:120]


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_solution_answers_every_exercise_and_its_check_accepts_it(path):
    lesson = exercises(load(ROOT / "notebooks" / path.name))
    found = exercises(load(path))
    assert sorted(found) == sorted(lesson), f"lesson exercises {sorted(lesson)}, solutions {sorted(found)}"
    for n, (title, cells) in found.items():
        assert title == lesson[n][0], f"exercise {n}: the heading differs from the lesson's"
        checks = check_cells(n, cells)
        assert checks, f"exercise {n}: no cell calls its check"
        for cell in checks:
            assert stored_text(cell).startswith(f"Exercise {n}: correct"), f"exercise {n}: {stored_text(cell)!r}"


DATA_LINE = re.compile(r"""^(?:[rbf]?("[^"]*"|'[^']*')|[-+]?[\d.e_]+|[\])}]+)\s*,?\s*(?:#.*)?$""")


def code_lines(cell):
    """A code cell's lines that carry code: no blank lines, comments, imports, or lines of bare data (a string, a
    number or closing brackets, as in a list of example sentences that a solution recreates), stripped."""
    lines = (line.strip() for line in source(cell).splitlines())
    return [
        line
        for line in lines
        if line and not line.startswith(("#", "import ", "from ", "%")) and not DATA_LINE.match(line)
    ]


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_no_solution_code_in_the_lesson(path):
    """No three consecutive code lines of a solution appear in its lesson (the setup and parameter cells aside)."""
    lesson = code_cells(load(ROOT / "notebooks" / path.name))[3:]
    lesson_windows = set()
    for cell in lesson:
        lines = code_lines(cell)
        lesson_windows.update(tuple(lines[i : i + 3]) for i in range(len(lines) - 2))
    for cell in code_cells(load(path))[3:]:
        lines = code_lines(cell)
        for i in range(len(lines) - 2):
            assert tuple(lines[i : i + 3]) not in lesson_windows, "solution code in the lesson:\n" + "\n".join(
                lines[i : i + 3]
            )


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_lesson_ends_with_a_link_to_the_next_notebook(path):
    last = source(load(path)["cells"][-1])
    later = [p for p in NOTEBOOKS if p.name > path.name]
    if later:
        assert f"]({later[0].name})" in last, f"the last cell should link to {later[0].name}"


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


MAIN_PATH_LESSONS = [p for p in NOTEBOOKS if "01" <= p.name[:2] <= "07"]
EXERCISES_HEADING = re.compile(r"^## Exercise", re.M)


def main_path(nb):
    """The cells a learner reads before the exercises: everything before the first `## Exercise...` heading."""
    cells = nb["cells"]
    first = next(i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and EXERCISES_HEADING.search(source(c)))
    return cells[:first]


ASSERT_LINE = re.compile(r"^\s*assert\b", re.M)


def test_lessons_01_to_07_keep_their_main_path_short():
    """The main path of lessons 01-07 together: at most 5,500 words of prose, 110 code cells and 40 assert
    statements (detours go to `## Going further`, after the exercises; checks that only compare with the package or
    PyTorch share a cell per section)."""
    words = codes = asserts = 0
    for path in MAIN_PATH_LESSONS:
        cells = main_path(load(path))
        words += sum(len(source(c).split()) for c in cells if c["cell_type"] == "markdown")
        codes += sum(c["cell_type"] == "code" for c in cells)
        asserts += sum(len(ASSERT_LINE.findall(source(c))) for c in cells if c["cell_type"] == "code")
    assert words <= 5500, f"lessons 01-07 hold {words} words before their exercises (at most 5,500)"
    assert codes <= 110, f"lessons 01-07 hold {codes} code cells before their exercises (at most 110)"
    assert asserts <= 40, f"lessons 01-07 hold {asserts} assert statements before their exercises (at most 40)"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_each_lessons_main_path_holds_at_most_1500_words_of_prose(path):
    """About 1,500 words of prose per lesson is plenty (the guide): side remarks, history and extra caveats go to
    `## Going further`, after the exercises."""
    words = sum(len(source(c).split()) for c in main_path(load(path)) if c["cell_type"] == "markdown")
    assert words <= 1500, f"{path.name} holds {words} words before its exercises (at most 1,500)"


@pytest.mark.parametrize("path", MAIN_PATH_LESSONS, ids=lambda p: p.name)
def test_every_assert_on_the_main_path_says_what_the_claim_needs(path):
    """An assert without a message stops a learner with a bare AssertionError."""
    import ast

    for cell in main_path(load(path)):
        if cell["cell_type"] == "code":
            code = "\n".join(line for line in source(cell).splitlines() if not line.lstrip().startswith(("%", "!")))
            for node in ast.walk(ast.parse(code)):
                if isinstance(node, ast.Assert):
                    assert node.msg is not None, f"assert without a message: {ast.unparse(node.test)[:80]}"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_summary_and_going_further_come_after_the_exercises(path):
    """Lessons 01-07: exercises, Summary, Going further (a reader who stops after the exercises gets the recap);
    later lessons: Going further after the exercises, the Summary last."""
    found = headings(load(path))
    exercises_at = min(i for i, line in found if line.startswith("## Exercise"))
    summary_at = min(i for i, line in found if line.startswith("## Summary"))
    going_further = [i for i, line in found if line.startswith("## Going further")]
    assert exercises_at < summary_at, "the Summary must come after the exercises"
    if path in MAIN_PATH_LESSONS:
        assert all(summary_at < i for i in going_further), "the Summary must come before Going further"
    else:
        assert all(exercises_at < i <= summary_at for i in going_further), "Going further: after the exercises"


@pytest.mark.parametrize("path", NOTEBOOKS + SOLUTIONS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_papermill_reads_every_parameter_of_the_parameters_cell(path):
    """`papermill --help-notebook` and `make run PARAMS=...` list the parameters papermill can parse: a line it cannot
    (an `=` inside the comment) is dropped from that list with a warning."""
    import ast

    import papermill

    cell = next(c for c in load(path)["cells"] if "parameters" in c["metadata"].get("tags", []))
    assigned = [node.targets[0].id for node in ast.parse(source(cell)).body if isinstance(node, ast.Assign)]
    assert assigned or has_no_parameters(cell), "an empty parameters cell says why in a comment"
    assert list(papermill.inspect_notebook(str(path))) == assigned
