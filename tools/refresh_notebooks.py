"""Re-run notebooks top to bottom in a fresh kernel and store their outputs in place (`make notebooks`).

Execution counts come out as 1, 2, 3, ...; per-cell timing metadata is not written, and consecutive
stdout (or stderr) chunks are merged into one output (how the kernel splits them depends on timing), so a
refresh that changes no output changes no byte, except in widget cells: each run gives a widget new random
model ids. Widget state (the figure the widget showed) is stored in the notebook's metadata, for viewers
that can show it without a kernel; a widget cell's output also holds a PNG of the widget's first view
(attention_helpers.viz.widgets), which GitHub, Colab, JupyterLab before running and the website show.
The kernel metadata is written as JupyterLab writes it (tools/notebook_metadata.py), so that opening a
refreshed notebook in JupyterLab leaves it unchanged.
"""

import sys
from pathlib import Path

import nbformat
import zmq
from nbclient import NotebookClient
from traitlets.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hang_watchdog import CellWatchdog, nbclient_options  # noqa: E402
from notebook_metadata import KERNEL_NAME, kernelspec  # noqa: E402

# Encrypt the kernel's transport when pyzmq can: otherwise ipykernel logs "Kernel is running over TCP without
# encryption" for every notebook (tools/run_notebooks.py does the same for papermill).
KERNEL_CONFIG = Config({"KernelManager": {"transport_encryption": "auto"}}) if zmq.has("curve") else Config()


def merge_streams(outputs: list) -> list:
    """Join each run of consecutive stream outputs with the same name (stdout, stderr) into one."""
    merged = []
    for output in outputs:
        previous = merged[-1] if merged else None
        if (
            output.output_type == "stream"
            and previous is not None
            and previous.output_type == "stream"
            and previous.name == output.name
        ):
            previous.text += output.text
        else:
            merged.append(output)
    return merged


def refresh(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    watchdog = CellWatchdog(str(path))  # no wall-clock limit per cell: the watchdog stops a hung one
    client = NotebookClient(
        notebook,
        kernel_name=KERNEL_NAME,
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
        config=KERNEL_CONFIG,
        **nbclient_options(watchdog),
    )
    try:
        client.execute()  # nbclient stores the kernel's language_info, as JupyterLab does
    except Exception:
        if watchdog.reason is None:
            raise
        sys.exit(watchdog.sentence())
    notebook.metadata["kernelspec"] = nbformat.from_dict(kernelspec())
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = merge_streams(cell.outputs)
    nbformat.write(notebook, path)
    print(f"refreshed {path}")


if __name__ == "__main__":
    for name in sys.argv[1:]:
        refresh(Path(name))
