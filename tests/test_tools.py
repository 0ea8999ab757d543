import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_cell_times_sums_papermill_durations(tmp_path):
    for name, durations in (("01_a.ipynb", [0.5, None, 1.25]), ("02_b.ipynb", [2.0])):
        cells = [{"metadata": {"papermill": {"duration": d}}} for d in durations] + [{"metadata": {}}]
        (tmp_path / name).write_text(json.dumps({"cells": cells}))
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "cell_times.py"), *sorted(map(str, tmp_path.glob("*.ipynb")))],
        check=True,
        capture_output=True,
        text=True,
    )
    lines = result.stdout.splitlines()
    assert "01_a.ipynb" in lines[0] and "1.8 s of cell time (slowest cell 1.2 s)" in lines[0]
    assert "02_b.ipynb" in lines[1] and "2.0 s" in lines[1]
    assert lines[2].startswith("series") and "3.8 s" in lines[2]


def test_refresh_merges_consecutive_stream_chunks():
    import importlib.util

    import nbformat

    spec = importlib.util.spec_from_file_location("refresh_notebooks", ROOT / "tools" / "refresh_notebooks.py")
    refresh_notebooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(refresh_notebooks)
    merge_streams = refresh_notebooks.merge_streams

    out = nbformat.v4.new_output
    outputs = [
        out("stream", name="stdout", text="a\n"),
        out("stream", name="stdout", text="b\n"),
        out("stream", name="stderr", text="warn\n"),
        out("display_data", data={"text/plain": "x"}),
        out("stream", name="stdout", text="c\n"),
    ]
    merged = merge_streams(outputs)
    assert [(o.output_type, o.get("name"), o.get("text")) for o in merged] == [
        ("stream", "stdout", "a\nb\n"),
        ("stream", "stderr", "warn\n"),
        ("display_data", None, None),
        ("stream", "stdout", "c\n"),
    ]
