"""Run a lesson under many seeds and tabulate every figure its asserts compare (`make sweep NB=12 SEEDS=16`).

    python tools/sweep.py NOTEBOOK --seeds 16 [--cpu AVX2] [--jobs auto] [--out benchmarks/sweeps] [-p NAME VALUE]

A claim about a trained model holds on every seed only if it was measured on many: this runs the lesson with
papermill once per seed (the stored seed first, then 1, 2, ...), with every `assert` of the lesson turned into a
record that never stops the run. An assert that compares (`figure > 0.6`, `0.2 < accuracy < 0.4`,
`all(shares > 0.6)`) records each compared value that is not a written number (a tensor's smallest or largest
element, whichever side of the comparison it is on); any other assert records whether it held. `--cpu` runs the
kernels as on an older kind of CPU (tools/cpu_settings.py's names: AVX512, AVX2, DEFAULT).

The result is a table per lesson and CPU setting, `OUT/NN_name.SETTING.md` beside the raw `.json`: for each
assert, its figures' minimum, median and maximum over the seeds, the threshold the lesson writes, the margin
between them, and how many seeds it held on; with the commit, CPU model and PyTorch version. tests/test_sweeps.py
checks that every threshold a training lesson asserts lies beyond its sweep's extremes.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "sweeps"
STORED_SEED = 123  # the seed of every lesson's stored run: the first of a sweep

# Injected before the lesson's first cell: the recorder that replaces `assert`.
RECORDER = '''
import json as _sweep_json

_sweep_records = []


def _sweep_value(value):
    """A recorded value: a number, a tensor's elements as numbers, or a bool."""
    if hasattr(value, "detach"):
        return [float(v) for v in value.detach().flatten().tolist()]
    if isinstance(value, bool) or value is None:
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return repr(value)[:80]


def _sweep_assert(key, held, operands=()):
    _sweep_records.append({"key": key, "held": bool(held), "operands": [_sweep_value(v) for v in operands]})
'''
WRITER = "with open({path!r}, 'w') as _f:\n    _sweep_json.dump(_sweep_records, _f)\n"

OPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


def claim_parts(test: ast.expr) -> tuple[list[ast.expr], list[str], bool] | None:
    """(operands, operators, elementwise) of a comparison assert, `all(...)` unwrapped; None for any other."""
    elementwise = False
    is_all = isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "all"
    if is_all and test.args and isinstance(test.args[0], ast.Compare):
        test, elementwise = test.args[0], True
    if not isinstance(test, ast.Compare) or not all(type(op) in OPS for op in test.ops):
        return None
    return [test.left, *test.comparators], [OPS[type(op)] for op in test.ops], elementwise


def is_number(node: ast.expr) -> bool:
    """A threshold written in the lesson: a literal number (possibly negative)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool)


def asserts(source: str) -> list[ast.Assert]:
    """Every assert statement in a cell's code, at any depth."""
    return [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Assert)]


def cell_code(cell) -> str | None:
    """A code cell's source as Python (IPython magics and shell lines make it unparsable: then None)."""
    try:
        ast.parse(cell.source)
    except SyntaxError:
        return None
    return cell.source


def lesson_asserts(notebook) -> list[tuple[str, ast.Assert]]:
    """(key, node) for each assert of the lesson: the key is `cell N: <the assert's test>`."""
    found = []
    for number, cell in enumerate(notebook.cells):
        if cell.cell_type == "code" and (code := cell_code(cell)) is not None:
            found += [(f"cell {number}: {ast.unparse(node.test)}", node) for node in asserts(code)]
    return found


class Recorder(ast.NodeTransformer):
    """assert <test>, <msg>  ->  _sweep_assert(key, <test>, [<compared values>])"""

    def __init__(self, number: int) -> None:
        self.number = number

    def visit_Assert(self, node: ast.Assert) -> ast.stmt:
        key = f"cell {self.number}: {ast.unparse(node.test)}"
        parts = claim_parts(node.test)
        if parts is None:
            call = f"_sweep_assert({key!r}, {ast.unparse(node.test)})"
        else:
            names = [f"_sweep_v{i}" for i in range(len(parts[0]))]
            values = ", ".join(ast.unparse(operand) for operand in parts[0])
            pattern = "bool(({} {} {}).all())" if parts[2] else "({} {} {})"
            chain = " and ".join(pattern.format(a, op, b) for a, op, b in zip(names, parts[1], names[1:], strict=False))
            call = f"({', '.join(names)},) = ({values},)\n_sweep_assert({key!r}, {chain}, [{', '.join(names)}])"
        return ast.parse(call).body if "\n" in call else ast.parse(call).body[0]


def instrumented(notebook_path: Path, record_path: Path):
    """The lesson with its asserts recording instead of raising, and a last cell writing the records."""
    import nbformat

    notebook = nbformat.read(notebook_path, as_version=4)
    for number, cell in enumerate(notebook.cells):
        if cell.cell_type == "code" and (code := cell_code(cell)) is not None and asserts(code):
            tree = ast.fix_missing_locations(Recorder(number).visit(ast.parse(code)))
            cell.source = ast.unparse(tree)
    notebook.cells.insert(0, nbformat.v4.new_code_cell(RECORDER))
    notebook.cells.append(nbformat.v4.new_code_cell(WRITER.format(path=str(record_path))))
    return notebook


def run_seed(notebook: str, seed: int, setting: str, parameters: dict, work: str) -> dict:
    """One papermill run; {'seed', 'records'} or {'seed', 'error'}."""
    import nbformat
    import papermill

    sys.path.insert(0, str(ROOT / "tools"))
    from hang_watchdog import CellWatchdog, nbclient_options
    from run_notebooks import kernel_config

    for pair in filter(None, setting.split(",")):
        name, value = pair.split("=", 1)
        os.environ[name] = value
    folder = Path(work) / f"seed_{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    record_path = folder / "records.json"
    nbformat.write(instrumented(Path(notebook), record_path), folder / "input.ipynb")
    watchdog = CellWatchdog(notebook)
    print(f"sweep: {notebook} seed {seed} {setting or 'native'}", flush=True)
    try:
        papermill.execute_notebook(
            str(folder / "input.ipynb"),
            str(folder / "output.ipynb"),
            parameters={**parameters, "seed": seed},
            cwd=str(Path(notebook).parent),
            kernel_name="python3",
            progress_bar=False,
            log_level="WARNING",
            config=kernel_config(),
            **nbclient_options(watchdog),
        )
    except Exception as error:  # a cell other than an assert failed: the seed has no figures
        return {"seed": seed, "error": (watchdog.sentence() if watchdog.reason else str(error))[-2000:]}
    return {"seed": seed, "records": json.loads(record_path.read_text())}


def reduce(values, side: str) -> float | None:
    """A recorded operand as one figure: a tensor's worst element for its side ('low': min, 'high': max)."""
    if isinstance(values, list):
        return (min if side == "low" else max)(values) if values else None
    return values if isinstance(values, float) else None


def sides(operators: list[str]) -> list[set[str]]:
    """For each operand of a chain, which extremes matter: the greater side of `>` needs its minimum, ..."""
    result = [set() for _ in range(len(operators) + 1)]
    for i, op in enumerate(operators):
        if op in (">", ">="):
            result[i].add("low"), result[i + 1].add("high")
        elif op in ("<", "<="):
            result[i].add("high"), result[i + 1].add("low")
        else:
            result[i].update(("low", "high")), result[i + 1].update(("low", "high"))
    return result


def claim_key(key: str) -> str:
    """An assert's text without its cell number and written numbers: a threshold set after the sweep, or a cell
    moved, still finds the figures the sweep recorded for it."""
    text = re.sub(r"^cell \d+: ", "", key)
    return re.sub(r"(?<![\w.])\d+(\.\d*)?(e-?\d+)?", "#", text)


def table_rows(notebook, runs: list[dict]) -> list[dict]:
    """One row per figure an assert of `notebook` compares (or per assert that compares nothing), over the seeds
    that ran, against the thresholds the notebook writes now. An assert run several times (in a loop) counts by its
    worst run."""
    rows = []
    ran = [run for run in runs if "records" in run]
    for key, node in lesson_asserts(notebook):
        seen = [[r for r in run["records"] if claim_key(r["key"]) == claim_key(key)] for run in ran]
        seen = [records for records in seen if records]
        parts = claim_parts(node.test)
        if parts is None:
            held = sum(all(r["held"] for r in records) for records in seen)
            rows.append({"assert": key, "figure": None, "held": held, "seeds": len(seen)})
            continue
        operands, operators, _ = parts
        before = len(rows)
        for index, (operand, wanted) in enumerate(zip(operands, sides(operators), strict=True)):
            if is_number(operand):
                continue
            for side in sorted(wanted):
                pick = min if side == "low" else max
                figures = []
                for records in seen:
                    values = [reduce(r["operands"][index], side) for r in records if index < len(r["operands"])]
                    values = [v for v in values if v is not None]
                    figures += [pick(values)] if values else []
                if not figures:
                    continue
                bound, op = _bound(operands, operators, index, side)
                worst = pick(figures)
                if bound is None:  # compared with another figure: whether the whole assert held
                    held = sum(all(r["held"] for r in records) for records in seen)
                else:
                    held = sum(COMPARE[op](f, bound) for f in figures)
                rows.append(
                    {
                        "assert": key,
                        "figure": ast.unparse(operand) + (" (smallest)" if side == "low" else " (largest)"),
                        "min": min(figures),
                        "median": statistics.median(figures),
                        "max": max(figures),
                        "threshold": bound,
                        "margin": None if bound is None else (worst - bound if side == "low" else bound - worst),
                        "held": held,
                        "seeds": len(figures),
                    }
                )
        if len(rows) == before:  # it compares no numbers (lists, strings): whether it held
            held = sum(all(r["held"] for r in records) for records in seen)
            rows.append({"assert": key, "figure": None, "held": held, "seeds": len(seen)})
    return rows


COMPARE = {">": float.__gt__, ">=": float.__ge__, "<": float.__lt__, "<=": float.__le__}


def _bound(operands, operators, index, side) -> tuple[float | None, str | None]:
    """The written number that operand `index` must stay above (side 'low') or below ('high'), if there is one, and
    how the figure must compare with it ('>' ...)."""
    flipped = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
    lower, upper = ("<", "<="), (">", ">=")
    if index > 0 and is_number(operands[index - 1]) and operators[index - 1] in (lower if side == "low" else upper):
        return float(ast.literal_eval(ast.unparse(operands[index - 1]))), flipped[operators[index - 1]]
    after = index + 1 < len(operands) and is_number(operands[index + 1])
    if after and operators[index] in (upper if side == "low" else lower):
        return float(ast.literal_eval(ast.unparse(operands[index + 1]))), operators[index]
    return None, None


def machine() -> dict:
    import torch

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        platform.processor() or "unknown",
    )
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    dirty = subprocess.run(["git", "status", "--porcelain", "notebooks"], cwd=ROOT, capture_output=True, text=True)
    return {
        "commit": commit.strip() + (" (notebooks changed since)" if dirty.stdout.strip() else ""),
        "cpu": cpu,
        "native_kernels": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
    }


def markdown(name: str, setting_name: str, facts: dict, seeds: list[int], runs: list[dict], rows: list[dict]) -> str:
    def number(x):
        return "" if x is None else f"{x:.4g}"

    failed = [run for run in runs if "error" in run]
    lines = [
        f"# Seed sweep of {name}, kernels: {setting_name}",
        "",
        f"Made by `make sweep NB={name[:2]} SEEDS={len(seeds)}"
        + ("" if setting_name == "native" else f" CPU={setting_name}")
        + f"` (tools/sweep.py) at commit {facts['commit']}, on {facts['cpu']} "
        f"(its own kernels: {facts['native_kernels']}), PyTorch {facts['torch']}. Seeds: "
        + ", ".join(map(str, seeds))
        + f" ({STORED_SEED} is the stored run's)."
        + (
            f" **{len(failed)} seeds stopped with an error**: " + ", ".join(str(r["seed"]) for r in failed)
            if failed
            else ""
        ),
        "",
        "The thresholds and cell numbers are the lesson's as it is now: `make sweep ... RETABLE=1` judges the stored "
        "figures again after a lesson changes its thresholds (a figure is found by its assert's text).",
        "",
        "For each figure an assert compares: its smallest, median and largest value over the seeds (a tensor counts by "
        "its worst element), the threshold the lesson writes, and the margin by which the worst seed cleared it.",
        "",
        "| assert | figure | min | median | max | threshold | margin | held on |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        text = row["assert"].replace("|", "\\|")
        if row["figure"] is None:
            lines.append(f"| `{text}` | (true or false) | | | | | | {row['held']}/{row['seeds']} |")
        else:
            spread = " | ".join(number(row[k]) for k in ("min", "median", "max", "threshold", "margin"))
            lines.append(f"| `{text}` | `{row['figure']}` | {spread} | {row['held']}/{row['seeds']} |")
    for run in failed:
        lines += ["", f"Seed {run['seed']} stopped: `{run['error'].strip().splitlines()[-1][:300]}`"]
    return "\n".join(lines) + "\n"


def _stored_run(work: Path, seed: int) -> dict:
    """A seed's figures from the sweep's working folder (a table made before the tables kept them)."""
    path = work / f"seed_{seed}" / "records.json"
    return {"seed": seed, "records": json.loads(path.read_text())} if path.exists() else {"seed": seed, "error": "lost"}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--seeds", type=int, default=16, help="how many seeds: the stored one, then 1, 2, ...")
    parser.add_argument("--cpu", default="native", help="native, or a name in tools/cpu_settings.py: AVX2, DEFAULT")
    parser.add_argument("--jobs", default="auto")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "sweep")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    parser.add_argument(
        "--retable",
        action="store_true",
        help="run nothing: the table again from the sweep's stored figures, against the lesson's asserts of now",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="run only the seeds whose figures the working folder lacks, then table all",
    )
    args = parser.parse_args(argv)
    import nbformat

    sys.path.insert(0, str(ROOT / "tools"))
    from cpu_settings import CPUS
    from run_notebooks import parse_value

    if args.cpu != "native" and args.cpu not in CPUS:
        parser.error(f"--cpu must be native or one of {', '.join(CPUS)}, got {args.cpu!r}")
    setting = "" if args.cpu == "native" else CPUS[args.cpu]
    seeds = [STORED_SEED, *range(1, args.seeds)]
    parameters = {name: parse_value(value) for name, value in args.parameter}
    tag = args.cpu + "".join(f".{n}={v}" for n, v in args.parameter)
    work = args.work / f"{args.notebook.stem}.{tag}"
    jobs = (os.cpu_count() or 1) if args.jobs == "auto" else int(args.jobs)
    stem = f"{args.notebook.stem}.{tag}"
    if args.retable and (args.out / f"{stem}.json").exists():
        stored = json.loads((args.out / f"{stem}.json").read_text())
        facts = {name: stored[name] for name in ("commit", "cpu", "native_kernels", "torch")}
        seeds = stored["seeds"]
        runs = stored.get("runs") or [_stored_run(work, seed) for seed in seeds]
    elif args.retable:  # a sweep stopped early: the seeds it finished, from its working folder
        runs = [run for run in (_stored_run(work, seed) for seed in seeds) if "records" in run]
        seeds, facts = [run["seed"] for run in runs], machine()
    else:
        todo = [seed for seed in seeds if not (args.resume and "records" in _stored_run(work, seed))]
        calls = [(str(args.notebook.resolve()), seed, setting, parameters, str(work)) for seed in todo]
        import concurrent.futures
        import multiprocessing

        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            done = {run["seed"]: run for run in pool.map(run_seed, *zip(*calls, strict=True))} if calls else {}
        runs = [done[seed] if seed in done else _stored_run(work, seed) for seed in seeds]
        facts = machine()
    notebook = nbformat.read(args.notebook, as_version=4)
    rows = table_rows(notebook, runs)
    args.out.mkdir(parents=True, exist_ok=True)
    table = {**facts, "setting": args.cpu, "parameters": parameters, "seeds": seeds, "rows": rows, "runs": runs}
    (args.out / f"{stem}.json").write_text(json.dumps(table, indent=None, separators=(",", ":")) + "\n")
    (args.out / f"{stem}.md").write_text(markdown(args.notebook.stem, tag, facts, seeds, runs, rows))
    print((args.out / f"{stem}.md").read_text())
    return 1 if any("error" in run for run in runs) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
