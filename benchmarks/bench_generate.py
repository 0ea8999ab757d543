"""Time text generation with and without the KV cache, both measured in this run.

    python benchmarks/bench_generate.py                 # 256 new tokens, lesson 10's model size, batch 1 and 8
    python benchmarks/bench_generate.py --batch 32 --new-tokens 64 --repeats 1
    python benchmarks/bench_generate.py --batch 1 --threads 1   # one thread each: steadier on a busy machine

Without the cache, every new token reruns the model on the whole sequence so far; with it, the prompt is run
once into a preallocated KVCache and each step feeds only the newest token, reusing every layer's cached keys and
values (the model checks its token ids once per call, at its entry point, not in every layer).
Prints, for each batch size, the median time of each and the ratio uncached / cached (the speed-up), and the
package's cached generation against a minimal plain-PyTorch cached decoder with the same weights, written as
nanoGPT's model.py (fused qkv, SDPA, its modules and dropout calls) plus preallocated keys and values: the cost of
the package's checks, options and the book's separate query, key and value projections. With one
sequence and a model this small, the cached step is dominated by the fixed cost of launching each small operation,
so the speed-up grows with the batch. Before timing, both are checked to produce the same tokens, greedy and
sampled with the same seed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from attention_helpers import GPT, GPTConfig, generate


class MinimalAttention(nn.Module):
    """nanoGPT's CausalSelfAttention (one fused qkv projection, SDPA), writing its keys and values into
    preallocated buffers: no checks, no options."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.c_attn = nn.Linear(d_model, 3 * d_model, bias=False)
        self.c_proj = nn.Linear(d_model, d_model)
        self.resid_dropout = nn.Dropout(0.0)

    def forward(self, x, keys, values, start: int):
        """``x`` ``(batch, num_new, d_model)`` at positions ``start...``; ``keys``, ``values`` ``(batch, num_heads,
        capacity, head_dim)``, this layer's buffers, filled up to ``start``."""
        batch, num_new, d_model = x.shape
        q, k, v = self.c_attn(x).split(d_model, dim=2)
        q = q.view(batch, num_new, self.num_heads, -1).transpose(1, 2)  # (batch, num_heads, num_new, head_dim)
        keys[:, :, start : start + num_new] = k.view(batch, num_new, self.num_heads, -1).transpose(1, 2)
        values[:, :, start : start + num_new] = v.view(batch, num_new, self.num_heads, -1).transpose(1, 2)
        end = start + num_new
        y = F.scaled_dot_product_attention(q, keys[:, :, :end], values[:, :, :end], is_causal=num_new > 1)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(batch, num_new, d_model)))


class MinimalMLP(nn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        self.c_fc = nn.Linear(d_model, 4 * d_model)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * d_model, d_model)
        self.dropout = nn.Dropout(0.0)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class MinimalBlock(nn.Module):
    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = MinimalAttention(d_model, num_heads)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = MinimalMLP(d_model)

    def forward(self, x, keys, values, start: int):
        x = x + self.attn(self.ln_1(x), keys, values, start)
        return x + self.mlp(self.ln_2(x))


class MinimalDecoder(nn.Module):
    """The same model as ``GPT`` (learned positions, tied head) written as nanoGPT's model.py writes it, holding
    copies of the GPT's weights, with a preallocated key/value buffer per layer."""

    def __init__(self, model: GPT):
        super().__init__()
        config = model.config
        self.num_heads = config.num_heads
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.wpe = nn.Embedding(config.context_length, config.d_model)
        self.drop = nn.Dropout(0.0)
        self.h = nn.ModuleList(MinimalBlock(config.d_model, config.num_heads) for _ in model.blocks)
        self.ln_f = nn.LayerNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in nanoGPT
        with torch.no_grad():
            self.wte.weight.copy_(model.token_embedding.weight)
            self.wpe.weight.copy_(model.position_embedding.weight)
            norms = [(model.final_norm, self.ln_f)]
            for ours, minimal in zip(model.blocks, self.h, strict=True):
                attention = ours.attention
                qkv = [attention.W_query.weight, attention.W_key.weight, attention.W_value.weight]
                minimal.attn.c_attn.weight.copy_(torch.cat(qkv))
                minimal.attn.c_proj.load_state_dict(attention.out_proj.state_dict())
                minimal.mlp.c_fc.load_state_dict(ours.ffn.linear1.state_dict())
                minimal.mlp.c_proj.load_state_dict(ours.ffn.linear2.state_dict())
                norms += [(ours.norm1, minimal.ln_1), (ours.norm2, minimal.ln_2)]
            for norm, ln in norms:
                ln.weight.copy_(norm.gamma)
                ln.bias.copy_(norm.beta)

    def forward(self, token_ids, buffers, start: int):
        """Logits ``(batch, 1, vocab_size)`` of the last of ``token_ids`` ``(batch, num_new)``, at positions
        ``start...``, after the ``start`` tokens held in ``buffers``."""
        positions = torch.arange(start, start + token_ids.shape[1])
        x = self.drop(self.wte(token_ids) + self.wpe(positions))
        for block, (keys, values) in zip(self.h, buffers, strict=True):
            x = block(x, keys, values, start)
        return self.lm_head(self.ln_f(x[:, [-1], :]))  # as nanoGPT at inference: the last position only

    @torch.inference_mode()
    def generate(self, token_ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
        """Greedy continuation of ``token_ids`` ``(batch, num_tokens)`` by ``new_tokens`` tokens."""
        capacity = token_ids.shape[1] + new_tokens
        shape = (token_ids.shape[0], self.num_heads, capacity, self.wte.weight.shape[1] // self.num_heads)
        buffers = [(torch.empty(shape), torch.empty(shape)) for _ in self.h]
        start = 0
        step_ids = token_ids
        for _ in range(new_tokens):
            logits = self(step_ids, buffers, start)
            start += step_ids.shape[1]
            step_ids = logits[:, -1, :].argmax(dim=-1, keepdim=True)
            token_ids = torch.cat([token_ids, step_ids], dim=1)
        return token_ids


def time_generation(model: GPT, prompt: torch.Tensor, new_tokens: int, repeats: int) -> dict[str, float]:
    """Median seconds of uncached and cached generation of ``new_tokens`` tokens after ``prompt``, and of the
    minimal plain-PyTorch cached decoder with the same weights."""

    def run(use_cache: bool, seed: int | None = None) -> torch.Tensor:
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        temperature = 0.0 if seed is None else 1.0
        return generate(model, prompt, new_tokens, temperature, use_cache=use_cache, generator=generator)

    for seed in (None, 0):  # also the warm-up
        if not torch.equal(run(True, seed), run(False, seed)):
            raise SystemExit("cached and uncached generation disagree")
    minimal = MinimalDecoder(model).eval()
    same = (minimal.generate(prompt, new_tokens) == run(True)).float().mean().item()
    if same < 0.9:  # the fused projection rounds differently: a near tie may flip a late greedy token, not most
        raise SystemExit(f"the minimal decoder agrees with the package on only {same:.0%} of the tokens")

    steps = {
        "uncached (recompute the prefix)": lambda: run(False),
        "cached (KV cache)": lambda: run(True),
        "minimal nanoGPT-style cached": lambda: minimal.generate(prompt, new_tokens),
    }
    times = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():  # alternate, so that a disturbance lands on all alike
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
        uncached, cached, minimal = medians.values()
        print(f"batch {batch}:")
        for name, seconds in medians.items():
            print(f"  {name:32s} {seconds * 1e3:9.1f} ms  {batch * args.new_tokens / seconds:8.0f} tokens/s")
        print(f"  speed-up of the cache (uncached / cached): {uncached / cached:.1f}x")
        print(f"  package's cached / minimal cached: {cached / minimal:.2f}x")
        results[batch] = {**medians, "speed-up": uncached / cached, "cached / minimal": cached / minimal}
    return results


if __name__ == "__main__":
    main()
