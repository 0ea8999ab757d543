"""Peak memory and time of three ways to compute attention, at growing numbers of tokens.

    python benchmarks/bench_attention_ram.py                    # 1k, 4k and 16k tokens, 1 head of 64, float32
    python benchmarks/bench_attention_ram.py --tokens 1024 2048 --heads 4
    python benchmarks/bench_attention_ram.py --threads 1    # on a busy machine, see below

- explicit: ``attention_helpers.attention_with_weights``, which stores the (num_tokens, num_tokens) scores
  and weights;
- tiled: ``attention_helpers.tiled_attention``, blocks of 128 queries and keys in a Python loop;
- fused: ``F.scaled_dot_product_attention``, PyTorch's fused kernel (on CPU, a FlashAttention-style kernel).

Each (implementation, size) runs in a fresh Python process, so that one measurement's memory cannot hide
another's. The extra peak memory of a call is the process's resident-memory high-water mark (VmHWM) after the
call minus its resident memory just before it, with the high-water mark reset first by writing 5 to
/proc/self/clear_refs (Linux). Where that file cannot be written, the ru_maxrss high-water mark before and after
the call is used instead, which can only under-count (attention_helpers._ram.PeakRAM, which lesson 13's ring
attention measures with too). Times are the median of --repeats calls, wall clock and
CPU (all threads). Ratios are against the fused kernel, measured in the same run.

The tiled loop runs thousands of small operations, and PyTorch splits each one across its threads: on a machine
whose cores are busy with other work, every operation waits for a thread to be scheduled, and the loop slows down
far more than the fused kernel. --threads 1 gives all three implementations one thread, which makes the ratios
less sensitive to the rest of the machine.

Writes the results to attention_helpers/results/attention_ram.json (--output), which lesson 11 plots: package
data, so that a plain `pip install` (Colab's) has them too.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from attention_helpers import attention_with_weights, tiled_attention
from attention_helpers._ram import PeakRAM

RESULTS = Path(__file__).resolve().parent.parent / "attention_helpers" / "results" / "attention_ram.json"
IMPLEMENTATIONS = ("explicit", "tiled", "fused")
MIB = 2**20


def attend(name: str, queries, keys, values, block_size: int) -> torch.Tensor:
    if name == "explicit":
        return attention_with_weights(queries, keys, values)[0]
    if name == "tiled":
        return tiled_attention(queries, keys, values, block_size=block_size)
    return F.scaled_dot_product_attention(queries, keys, values)


def measure(name: str, num_tokens: int, args) -> dict:
    """Run one implementation in this process; return its extra peak memory (MiB) and median times (s)."""
    heads, head_dim, block_size, repeats = args.heads, args.head_dim, args.block_size, args.repeats
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    warm = [torch.randn(1, heads, 256, head_dim) for _ in range(3)]
    attend(name, *warm, block_size)  # load the kernels and start the thread pool before measuring
    del warm
    queries, keys, values = (torch.randn(1, heads, num_tokens, head_dim) for _ in range(3))

    peak = PeakRAM()
    wall, cpu = [], []
    for repeat in range(repeats):
        wall_start, cpu_start = time.perf_counter(), time.process_time()
        with torch.no_grad():
            context_vec = attend(name, queries, keys, values, block_size)
        wall.append(time.perf_counter() - wall_start)
        cpu.append(time.process_time() - cpu_start)
        if repeat == 0:  # the first call's peak: later calls may reuse memory that the first one freed
            extra_peak_mib = peak.extra_mib()
        del context_vec
    return {
        "implementation": name,
        "num_tokens": num_tokens,
        "extra_peak_mib": extra_peak_mib,
        "wall_s": statistics.median(wall),
        "cpu_s": statistics.median(cpu),
        "peak_method": peak.method,
    }


def run_in_fresh_process(name: str, num_tokens: int, args) -> dict:
    command = [sys.executable, __file__, "--worker", name, "--tokens", str(num_tokens)]
    command += ["--heads", str(args.heads), "--head-dim", str(args.head_dim)]
    command += ["--block-size", str(args.block_size), "--repeats", str(args.repeats), "--threads", str(args.threads)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{name} at {num_tokens} tokens failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def check_agreement(heads: int, head_dim: int, block_size: int) -> None:
    """All three give the same output (float32, 1e-5) at a size that is not a multiple of the block."""
    torch.manual_seed(0)
    inputs = [torch.randn(1, heads, 3 * block_size + 5, head_dim) for _ in range(3)]
    reference = attend("fused", *inputs, block_size)
    for name in IMPLEMENTATIONS:
        torch.testing.assert_close(attend(name, *inputs, block_size), reference, atol=1e-5, rtol=1e-5)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--heads", type=int, default=1)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads in each measurement (0: torch's default)")
    parser.add_argument("--output", type=Path, default=RESULTS, help="where to write the results (JSON)")
    parser.add_argument("--worker", choices=IMPLEMENTATIONS, help=argparse.SUPPRESS)  # one measurement, in a child
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(measure(args.worker, args.tokens[0], args)))
        return []

    check_agreement(args.heads, args.head_dim, args.block_size)
    threads = args.threads or torch.get_num_threads()
    print(
        f"batch 1, {args.heads} head(s) of {args.head_dim}, no mask, float32, CPU with {threads} thread(s), "
        f"tiled blocks of {args.block_size}; each measurement in a fresh process, times the median of "
        f"{args.repeats} calls; ratios against the fused kernel"
    )
    results = []
    for num_tokens in args.tokens:
        rows = {name: run_in_fresh_process(name, num_tokens, args) for name in IMPLEMENTATIONS}
        results += rows.values()
        fused = rows["fused"]
        matrix_mib = args.heads * num_tokens**2 * 4 / MIB
        print(f"\n{num_tokens} tokens (one float32 score matrix: {matrix_mib:,.0f} MiB)")
        ratio = "/ fused"
        print(f"  {'':10s} {'extra peak MiB':>15s} {ratio:>8s} {'wall s':>8s} {ratio:>8s} {'CPU s':>7s} {ratio:>8s}")
        for name, row in rows.items():
            print(
                f"  {name:10s} {row['extra_peak_mib']:15.1f} {row['extra_peak_mib'] / fused['extra_peak_mib']:8.2f} "
                f"{row['wall_s']:8.3f} {row['wall_s'] / fused['wall_s']:8.2f} "
                f"{row['cpu_s']:7.3f} {row['cpu_s'] / fused['cpu_s']:8.2f}"
            )
    report = {
        "settings": {
            "batch": 1,
            "heads": args.heads,
            "head_dim": args.head_dim,
            "block_size": args.block_size,
            "repeats": args.repeats,
            "threads": threads,
            "dtype": "float32",
            "mask": None,
        },
        "machine": {
            "torch": torch.__version__,
            "cpu_count": torch.multiprocessing.cpu_count(),
            "platform": platform.platform(),
        },
        "results": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    print(f"\nwrote {args.output.name}")
    return results


if __name__ == "__main__":
    main()
