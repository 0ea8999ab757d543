"""Train lesson 12's date translator and write the weights that ship with the package (lesson 01 draws its map).

    OMP_NUM_THREADS=1 PYTHONPATH=. python tools/train_date_model.py

The defaults are lesson 12's parameters, data and training loop (Adam, warmup then cosine, teacher forcing), so the
shipped model is the one lesson 12 trains. One thread and fixed seeds make a run repeat exactly on a given machine;
another CPU's vector kernels change the last bits of the trajectory, so only the held-out exact match is a stable
figure (tests/test_pretrained_dates.py checks the shipped weights reach it). The parameters are stored in float16
(half the bytes of float32; the buffers are rebuilt when loading) with the sizes that rebuild the model:
``attention_helpers.pretrained_date_translator()`` loads them in float32.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F

import attention_helpers as ah
from attention_helpers import dates

# Lesson 12's parameters cell (num_train and num_heldout: its make_dates call; warmup_steps: its training cell).
DEFAULTS = dict(
    seed=123,
    d_model=64,
    num_heads=4,
    num_encoder_layers=2,
    num_decoder_layers=2,
    ffn_hidden=128,
    batch_size=64,
    learning_rate=3e-3,
    num_steps=1000,
    warmup_steps=50,
    num_train=20_000,
    num_heldout=1_000,
)
SIZES = ("d_model", "num_heads", "num_encoder_layers", "num_decoder_layers", "ffn_hidden")


def train(settings: dict) -> tuple[ah.Seq2SeqTransformer, dates.DateData]:
    """Lesson 12's training run with ``settings`` (the keys of DEFAULTS): the trained model and its data."""
    data = dates.make_dates(settings["num_train"], settings["num_heldout"], seed=settings["seed"])
    vocab_size = data.tokenizer.vocab_size
    torch.manual_seed(settings["seed"])
    sizes = {name: settings[name] for name in SIZES}
    model = ah.Seq2SeqTransformer(ah.Seq2SeqConfig(src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, **sizes))
    optimizer = torch.optim.Adam(model.parameters(), lr=settings["learning_rate"])
    generator = torch.Generator().manual_seed(settings["seed"])
    num_steps = settings["num_steps"]
    model.train()
    for step in range(num_steps):
        for group in optimizer.param_groups:
            group["lr"] = ah.warmup_cosine_lr(step, num_steps, settings["learning_rate"], settings["warmup_steps"])
        batch = torch.randint(0, len(data.train_src), (settings["batch_size"],), generator=generator)
        src, tgt = data.train_src[batch], data.train_tgt[batch]
        logits = model(src, tgt[:, :-1])  # (batch_size, 10, vocab_size): teacher forcing
        loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), data


def save(model: ah.Seq2SeqTransformer, settings: dict, path: Path) -> None:
    """The parameters in float16 and the sizes that rebuild the model (the format pretrained_date_translator reads)."""
    parameters = {name: p.detach().to(torch.float16) for name, p in model.named_parameters()}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"sizes": {name: settings[name] for name in SIZES}, "parameters": parameters}, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in DEFAULTS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    parser.add_argument("--out", type=Path, default=dates.PRETRAINED_WEIGHTS, help="where to write the weights")
    settings = vars(parser.parse_args(argv))
    out = settings.pop("out")
    torch.set_num_threads(1)  # with the seeds, makes a run repeat exactly on one machine
    model, data = train(settings)
    save(model, settings, out)
    loaded = dates.pretrained_date_translator(out)  # what the package will load: float16 weights, float32 maths
    predicted = ah.greedy_decode(loaded, data.heldout_src, data.tokenizer.bos_id, dates.TARGET_LEN)
    exact = dates.exact_match(predicted, data.heldout_tgt[:, 1:])
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    print(f"held-out exact match of the saved weights: {exact:.3f} ({len(data.heldout_texts):,} dates)")


if __name__ == "__main__":
    main()
