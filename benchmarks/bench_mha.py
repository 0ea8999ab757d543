"""Time MultiHeadAttention against PyTorch's modules and the book's class, all measured in this run.

    python benchmarks/bench_mha.py            # batch 8, 1024 tokens, d=768, 12 heads, causal, float32, CPU
    python benchmarks/bench_mha.py --tokens 256 --repeats 5

Prints the median time of each implementation and its ratio to the minimal module (one fused qkv projection
plus F.scaled_dot_product_attention), to nn.MultiheadAttention(need_weights=False) and to the book's class.
Ratios, not seconds, are the result: they compare implementations on the same machine at the same moment.
Before timing, every implementation is checked to give the same output from the same weights.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from attention_helpers import MultiHeadAttention, causal_mask, to_torch

# The book's MultiHeadAttention as the book writes it (explicit masked_fill, softmax, dropout on the weights),
# the one definition the tests also compare against.
_spec = importlib.util.spec_from_file_location(
    "book_reference", Path(__file__).parent.parent / "tests" / "book_reference.py"
)
book_reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(book_reference)
BookMultiHeadAttention = book_reference.MultiHeadAttention


class MinimalAttention(nn.Module):
    """The least code that does the job: one fused qkv projection and PyTorch's fused attention kernel."""

    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        b, n, d = x.shape
        # (b, n, 3d) -> (3, b, heads, n, head_dim)
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, d // self.num_heads).permute(2, 0, 3, 1, 4)
        context = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out_proj(context.transpose(1, 2).reshape(b, n, d))


def build(d_model: int, num_heads: int, tokens: int) -> tuple[dict[str, callable], list[nn.Module]]:
    """Every implementation with the same weights (all with biases, as nn.MultiheadAttention has by default)."""
    ours = MultiHeadAttention(d_model, d_model, tokens, 0.0, num_heads, qkv_bias=True)
    torch_mha = to_torch(ours)
    minimal = MinimalAttention(d_model, num_heads)
    book = BookMultiHeadAttention(d_model, d_model, tokens, 0.0, num_heads, qkv_bias=True)
    with torch.no_grad():
        minimal.qkv.weight.copy_(torch_mha.in_proj_weight)
        minimal.qkv.bias.copy_(torch_mha.in_proj_bias)
        minimal.out_proj.load_state_dict(ours.out_proj.state_dict())
        book.load_state_dict({**ours.state_dict(), "mask": book.mask})
    mask = causal_mask(tokens)
    modules = [ours, torch_mha, minimal, book]
    impls = {
        "ours, fast path": lambda x: ours(x),
        "ours, explicit path": lambda x: ours(x, return_weights=True)[0],
        "minimal (fused qkv + SDPA)": lambda x: minimal(x),
        "nn.MultiheadAttention": lambda x: torch_mha(x, x, x, attn_mask=mask, is_causal=True, need_weights=False)[0],
        "book's class": lambda x: book(x),
    }
    return impls, modules


def median_seconds(steps: dict[str, callable], repeats: int) -> dict[str, float]:
    """Median time of each step. The steps take turns within every repeat, so a disturbance from the rest of
    the machine lands on all of them alike instead of on whichever happened to be running."""
    for step in steps.values():
        step()  # warm-up: allocator, thread pool, kernel selection
    times = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    impls, modules = build(args.dim, args.heads, args.tokens)
    params = [x for m in modules for x in m.parameters()]
    x = torch.randn(args.batch, args.tokens, args.dim)
    with torch.no_grad():
        reference = impls["minimal (fused qkv + SDPA)"](x)
        for name, fn in impls.items():
            torch.testing.assert_close(fn(x), reference, atol=1e-4, rtol=1e-4, msg=f"{name} disagrees")

    print(
        f"batch {args.batch}, {args.tokens} tokens, d={args.dim}, {args.heads} heads, causal, float32, "
        f"CPU with {torch.get_num_threads()} threads; median of {args.repeats} runs"
    )
    results: dict[str, dict[str, float]] = {}
    x_grad = x.clone().requires_grad_()
    for mode in ("forward", "forward+backward"):
        steps = {}
        for name, fn in impls.items():
            if mode == "forward":

                def step(fn=fn):
                    with torch.no_grad():
                        fn(x)
            else:

                def step(fn=fn):
                    for tensor in params:  # fresh gradients every time, as after optimizer.zero_grad()
                        tensor.grad = None
                    fn(x_grad).sum().backward()

            steps[name] = step
        timings = median_seconds(steps, args.repeats)
        base, torch_time, book_time = (
            timings["minimal (fused qkv + SDPA)"],
            timings["nn.MultiheadAttention"],
            timings["book's class"],
        )
        print(f"\n{mode}:")
        print(f"  {'implementation':28s} {'ms':>8s} {'/ minimal':>10s} {'/ nn.MHA':>9s} {'/ book':>11s}")
        for name, seconds in timings.items():
            print(
                f"  {name:28s} {seconds * 1e3:8.1f} {seconds / base:10.2f} {seconds / torch_time:9.2f} "
                f"{seconds / book_time:11.2f}"
            )
        results[mode] = timings
    return results


if __name__ == "__main__":
    main()
