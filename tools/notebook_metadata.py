"""Store the notebooks' kernel metadata as JupyterLab writes it, so that opening one changes nothing.

    python tools/notebook_metadata.py NOTEBOOK...          # rewrite kernelspec and language_info in place
    python tools/notebook_metadata.py --check NOTEBOOK...  # list the notebooks that differ; exit 1 if any

When JupyterLab starts a notebook's kernel, it writes the kernel's spec (name, display name, language) into
`metadata.kernelspec` and the kernel's `language_info` into `metadata.language_info`; a notebook stored with
anything else ("Python 3" where the kernel says "Python 3 (ipykernel)") becomes dirty and autosave writes it
about two minutes later. This tool asks this environment's `python3` kernel for both, once, and writes them;
the rest of the metadata and every cell stay as they are. `tools/refresh_notebooks.py` (make notebooks) does
the same after each run, so a refreshed notebook comes out in JupyterLab's form.

`language_info.version` is the Python version of the kernel (3.11.7 here): JupyterLab running another Python
records its own version, which is the one change that opening a notebook can still make.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

KERNEL_NAME = "python3"


def kernelspec(kernel_name: str = KERNEL_NAME) -> dict:
    """The `metadata.kernelspec` JupyterLab writes for a kernel: its name, display name and language."""
    from jupyter_client.kernelspec import get_kernel_spec

    spec = get_kernel_spec(kernel_name)
    return {"display_name": spec.display_name, "language": spec.language, "name": kernel_name}


def language_info(kernel_name: str = KERNEL_NAME) -> dict:
    """The kernel's own `language_info` (from its kernel_info reply), as JupyterLab stores it."""
    import zmq
    from jupyter_client.manager import KernelManager
    from traitlets.config import Config

    # encrypted transport, as in refresh_notebooks.py: no "running over TCP without encryption" warning
    config = Config({"KernelManager": {"transport_encryption": "auto"}}) if zmq.has("curve") else Config()
    manager = KernelManager(kernel_name=kernel_name, config=config)
    manager.start_kernel()
    client = manager.client()
    try:
        client.start_channels()
        client.wait_for_ready(timeout=120)
        return client.kernel_info(reply=True, timeout=60)["content"]["language_info"]
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def normalise(notebook: nbformat.NotebookNode, spec: dict, info: dict) -> bool:
    """Set the notebook's kernelspec and language_info; True if that changed them."""
    before = (notebook.metadata.get("kernelspec"), notebook.metadata.get("language_info"))
    notebook.metadata["kernelspec"] = nbformat.from_dict(spec)
    notebook.metadata["language_info"] = nbformat.from_dict(info)
    return before != (spec, info)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    paths = [Path(a) for a in argv if a != "--check"]
    if not paths:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    spec, info = kernelspec(), language_info()
    differ = []
    for path in paths:
        notebook = nbformat.read(path, as_version=4)
        if normalise(notebook, spec, info):
            differ.append(path)
            if not check:
                nbformat.write(notebook, path)
    verb = "differ from" if check else "rewritten to"
    for path in differ:
        print(f"{path}: kernel metadata {verb} JupyterLab's form ({spec['display_name']}, Python {info['version']})")
    return 1 if check and differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
