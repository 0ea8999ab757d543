"""Execute notebooks with papermill into a directory, with parameters (`make run`, `make papermill-check`).

    python tools/run_notebooks.py OUT_DIR NOTEBOOK... [-p NAME VALUE ...]

The same as papermill's command line (`-p seed 7` sets `seed = 7` in an injected cell after the `parameters`
cell; numbers, True/False/None are parsed, anything else is a string), with two differences. The kernel is
started with CurveZMQ transport encryption when its kernelspec supports it: without that, every recent
ipykernel logs "Kernel is running over TCP without encryption" on start, once per notebook; papermill's
command line cannot pass jupyter_client's `KernelManager.transport_encryption` setting, its Python API can.
And no cell has a wall-clock limit, which would fail a correct run on a slow or busy machine: the hang
watchdog (tools/hang_watchdog.py) stops a cell that waits or loops, and the run ends with one sentence
saying which cell and what to do.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

KERNEL_CONFIG = {"KernelManager": {"transport_encryption": "auto"}}


def parse_value(text: str):
    """'7' -> 7, '0.5' -> 0.5, 'True' -> True, 'None' -> None, anything else stays a string."""
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return {"True": True, "False": False, "None": None}.get(text, text)


def kernel_config():
    """The jupyter_client setting that starts the kernel with encryption, or nothing if pyzmq lacks CurveZMQ."""
    import zmq
    from traitlets.config import Config

    return Config(KERNEL_CONFIG) if zmq.has("curve") else Config()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    args = parser.parse_args(argv)
    if not args.notebooks:
        parser.error("no notebook given")
    import papermill

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from hang_watchdog import CellWatchdog, nbclient_options

    parameters = {name: parse_value(value) for name, value in args.parameter}
    config = kernel_config()
    for notebook in args.notebooks:
        out = args.out_dir / notebook.resolve().parent.name / notebook.name  # a lesson and its solutions share a name
        out.parent.mkdir(parents=True, exist_ok=True)
        shown = " ".join(f"-p {n} {v}" for n, v in args.parameter)
        print(f"papermill {notebook} -> {out} {shown}".rstrip(), flush=True)
        watchdog = CellWatchdog(str(notebook))
        try:
            papermill.execute_notebook(
                str(notebook),
                str(out),
                parameters=parameters,
                cwd=str(notebook.parent),
                kernel_name="python3",
                progress_bar=False,
                log_level="WARNING",
                config=config,
                **nbclient_options(watchdog),
            )
        except Exception:
            if watchdog.reason is None:
                raise
            print(watchdog.sentence(), file=sys.stderr, flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
