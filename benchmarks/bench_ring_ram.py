"""Per-rank peak memory of ring attention against one process attending over the whole sequence.

    python benchmarks/bench_ring_ram.py                          # 8k tokens, 1 and 2 processes, causal
    python benchmarks/bench_ring_ram.py --tokens 4096 --world-sizes 1 2 --not-causal

Each world size runs in fresh processes (``attention_helpers.distributed.run``, gloo, one thread per rank). A
rank's peak is the bytes of its shards of q, k and v plus how far its resident memory rose during
``ring_attention`` (VmHWM after a reset through /proc/self/clear_refs, minus VmRSS before; ru_maxrss elsewhere).
With one process, ``ring_attention`` is lesson 11's ``partial_attention`` over the whole sequence, so both sides
use the same block computation, which stores its block's scores: a rank of P holds a (num_tokens / P)² block
instead of num_tokens², and 1/P of the keys and values plus one block in transit. Batch 1, one head.
"""

from __future__ import annotations

import argparse

from attention_helpers.distributed import cpu_count, run
from attention_helpers.distributed.examples import ring_peak_ram


def main(argv: list[str] | None = None) -> dict[int, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192, help="sequence length (default 8192)")
    parser.add_argument("--head-dim", type=int, default=64, help="width of queries, keys and values (64)")
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2], help="process counts (1 2)")
    parser.add_argument("--not-causal", action="store_true", help="attend to every key (default: causal)")
    args = parser.parse_args(argv)
    causal = not args.not_causal
    peaks = {}
    for world_size in args.world_sizes:
        peaks[world_size] = run(ring_peak_ram, world_size, args.tokens, args.head_dim, causal)
    print(f"ring attention, {args.tokens:,} tokens, head_dim {args.head_dim}, causal={causal}, {cpu_count()} CPU(s)")
    base = max(peaks[min(peaks)])
    print(f"{'processes':>10} {'peak MiB per rank':>30} {'largest / ' + str(min(peaks)) + ' process(es)':>26}")
    for world_size, per_rank in peaks.items():
        ranks = " ".join(f"{p:.1f}" for p in per_rank)
        print(f"{world_size:>10} {ranks:>30} {max(per_rank) / base:>26.2f}")
    return peaks


if __name__ == "__main__":
    main()
