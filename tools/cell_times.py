"""Print how long each notebook's cells took, from papermill's output notebooks, and the series' total.

`make papermill-check` and `make run` call it on the notebooks they wrote: `cell_times.py build/run/*/*.ipynb`.
Cell time is the sum of papermill's per-cell durations; kernel start-up is not included.
"""

import json
import sys
from pathlib import Path


def cell_seconds(path: Path) -> tuple[float, float]:
    """(total, slowest cell) in seconds for one papermill output notebook."""
    cells = json.loads(path.read_text())["cells"]
    durations = [cell["metadata"].get("papermill", {}).get("duration") or 0.0 for cell in cells]
    return sum(durations), max(durations, default=0.0)


if __name__ == "__main__":
    total = 0.0
    for name in sys.argv[1:]:
        seconds, slowest = cell_seconds(Path(name))
        total += seconds
        label = f"{Path(name).parent.name}/{Path(name).name}"  # a lesson and its solutions share a name
        print(f"{label:45} {seconds:6.1f} s of cell time (slowest cell {slowest:.1f} s)")
    print(f"{'series':45} {total:6.1f} s of cell time")
