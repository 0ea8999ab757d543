"""Re-run notebooks top to bottom in a fresh kernel and store their outputs in place (`make notebooks`).

Execution counts come out as 1, 2, 3, ...; per-cell timing metadata is not written, so a refresh that
changes no output changes no byte.
"""

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def refresh(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
    nbformat.write(notebook, path)
    print(f"refreshed {path}")


if __name__ == "__main__":
    for name in sys.argv[1:]:
        refresh(Path(name))
