"""Execute notebooks with papermill into a directory, with parameters (`make run`, `make papermill-check`).

    python tools/run_notebooks.py OUT_DIR NOTEBOOK... [-p NAME VALUE ...]

The same as papermill's command line (`-p seed 7` sets `seed = 7` in an injected cell after the `parameters`
cell; numbers, True/False/None are parsed, anything else is a string), with two differences. The kernel is
started with CurveZMQ transport encryption when its kernelspec supports it: without that, every recent
ipykernel logs "Kernel is running over TCP without encryption" on start, once per notebook; papermill's
command line cannot pass jupyter_client's `KernelManager.transport_encryption` setting, its Python API can.
And no cell has a wall-clock limit, which would fail a correct run on a slow or busy machine: the hang
watchdog (tools/hang_watchdog.py) stops a cell that waits or loops, and the run ends with one sentence
saying which cell and what to do. `--jobs N` runs N notebooks at once (`auto`: one per CPU core);
`--skip-unused` leaves out a notebook in which no cell uses the parameters given (make papermill-check: a
notebook that takes a seed but draws nothing random would repeat its stored run, which make nbval checks).
"""

from __future__ import annotations

import argparse
import os
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


def uses_parameters(notebook: Path, names: list[str]) -> bool:
    """Whether any code cell other than the `parameters` cell uses one of the names outside a parameter check
    (`ah.check_parameter(...)` lines): if none does, a run with those parameters changed repeats the stored run."""
    import re

    import nbformat

    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type != "code" or "parameters" in cell.metadata.get("tags", []):
            continue
        code = "\n".join(line for line in cell.source.splitlines() if "check_parameter(" not in line)
        if any(re.search(rf"\b{re.escape(name)}\b", code) for name in names):
            return True
    return False


def run_one(notebook: Path, out: Path, parameters: dict, shown: str) -> str | None:
    """Execute one notebook with papermill; None if it ran, else what went wrong in one sentence."""
    import papermill

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from hang_watchdog import CellWatchdog, nbclient_options

    out.parent.mkdir(parents=True, exist_ok=True)
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
            config=kernel_config(),
            **nbclient_options(watchdog),
        )
    except Exception as error:
        if watchdog.reason is not None:
            return watchdog.sentence()
        if type(error).__name__ == "PapermillExecutionError":  # a cell raised: its traceback says why
            return f"{notebook}: {error}".rstrip()
        raise
    return None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    parser.add_argument("--jobs", default="1", help="notebooks run at once: a number, or auto (one per CPU core)")
    parser.add_argument(
        "--skip-unused",
        action="store_true",
        help="skip a notebook that uses none of the parameters given (its run would repeat the stored run)",
    )
    args = parser.parse_args(argv)
    if not args.notebooks:
        parser.error("no notebook given")
    if args.skip_unused and args.parameter:
        names = [name for name, _value in args.parameter]
        for notebook in [nb for nb in args.notebooks if not uses_parameters(nb, names)]:
            print(f"{notebook}: skipped, no cell uses {', '.join(names)} (make nbval runs it as stored)", flush=True)
            args.notebooks.remove(notebook)
    jobs = (os.cpu_count() or 1) if args.jobs == "auto" else int(args.jobs)
    parameters = {name: parse_value(value) for name, value in args.parameter}
    shown = " ".join(f"-p {n} {v}" for n, v in args.parameter)
    # a lesson and its solutions share a name
    runs = [(nb, args.out_dir / nb.resolve().parent.name / nb.name, parameters, shown) for nb in args.notebooks]
    if jobs <= 1:
        for run in runs:
            problem = run_one(*run)
            if problem:
                print(problem, file=sys.stderr, flush=True)
                return 1
        return 0
    import concurrent.futures
    import multiprocessing

    failed = False
    context = multiprocessing.get_context("spawn")  # each worker starts clean: no threads, loops or kernels
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        for problem in pool.map(
            run_one, *zip(*runs, strict=True)
        ):  # in the given order, each as soon as a worker is free
            if problem:
                print(problem, file=sys.stderr, flush=True)
                failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
