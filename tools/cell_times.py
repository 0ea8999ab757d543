"""Print how long each notebook's cells took, from papermill's output notebooks, each folder's total and the series'.

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
    by_folder: dict[str, float] = {}  # notebooks/ (the lessons) and solutions/ apart
    for name in sys.argv[1:]:
        seconds, slowest = cell_seconds(Path(name))
        folder = Path(name).parent.name
        by_folder[folder] = by_folder.get(folder, 0.0) + seconds
        label = f"{folder}/{Path(name).name}"  # a lesson and its solutions share a name
        print(f"{label:45} {seconds:6.1f} s of cell time (slowest cell {slowest:.1f} s)")
    for folder, seconds in by_folder.items():
        print(f"{'all of ' + folder + '/':45} {seconds:6.1f} s of cell time")
    print(f"{'series':45} {sum(by_folder.values()):6.1f} s of cell time")
