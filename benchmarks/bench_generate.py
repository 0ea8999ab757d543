"""Time text generation with and without the KV cache, both measured in this run.

    python benchmarks/bench_generate.py                 # 256 new tokens, lesson 10's model size, batch 1 and 8
    python benchmarks/bench_generate.py --batch 32 --new-tokens 64 --repeats 1
    python benchmarks/bench_generate.py --batch 1 --threads 1   # one thread each: steadier on a busy machine

Without the cache, every new token reruns the model on the whole sequence so far; with it, the prompt is run
once into a preallocated KVCache and each step feeds only the newest token, reusing every layer's cached keys and
values (the model checks its token ids once per call, at its entry point, not in every layer).
Prints, for each batch size, the median time of each and the ratio uncached / cached (the speed-up). With one
sequence and a model this small, the cached step is dominated by the fixed cost of launching each small operation,
so the speed-up grows with the batch. Before timing, both are checked to produce the same tokens, greedy and
sampled with the same seed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from attention_helpers import GPT, GPTConfig, generate


def time_generation(model: GPT, prompt: torch.Tensor, new_tokens: int, repeats: int) -> dict[str, float]:
    """Median seconds of uncached and cached generation of ``new_tokens`` tokens after ``prompt``."""

    def run(use_cache: bool, seed: int | None = None) -> torch.Tensor:
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        temperature = 0.0 if seed is None else 1.0
        return generate(model, prompt, new_tokens, temperature, use_cache=use_cache, generator=generator)

    for seed in (None, 0):  # also the warm-up
        if not torch.equal(run(True, seed), run(False, seed)):
            raise SystemExit("cached and uncached generation disagree")

    steps = {"uncached (recompute the prefix)": lambda: run(False), "cached (KV cache)": lambda: run(True)}
    times = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():  # alternate, so that a disturbance lands on both alike
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv: list[str] | None = None) -> dict[int, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=73)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, help="PyTorch's CPU threads (default: one per core)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    context_length = args.prompt_tokens + args.new_tokens  # the whole generation fits: the cache is never reset
    model = GPT(
        GPTConfig(
            vocab_size=args.vocab,
            context_length=context_length,
            d_model=args.dim,
            num_heads=args.heads,
            num_layers=args.layers,
            dropout=0.0,
        )
    ).eval()
    print(
        f"GPT d_model={args.dim}, {args.heads} heads, {args.layers} layers; {args.prompt_tokens}-token prompt, "
        f"{args.new_tokens} new tokens, greedy, float32, CPU with {torch.get_num_threads()} threads; "
        f"median of {args.repeats} runs"
    )
    results = {}
    for batch in args.batch:
        prompt = torch.randint(0, args.vocab, (batch, args.prompt_tokens))
        medians = time_generation(model, prompt, args.new_tokens, args.repeats)
        uncached, cached = medians.values()
        print(f"batch {batch}:")
        for name, seconds in medians.items():
            print(f"  {name:32s} {seconds * 1e3:9.1f} ms  {batch * args.new_tokens / seconds:8.0f} tokens/s")
        print(f"  speed-up of the cache (uncached / cached): {uncached / cached:.1f}x")
        results[batch] = {**medians, "speed-up": uncached / cached}
    return results


if __name__ == "__main__":
    main()
