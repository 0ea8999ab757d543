"""The trained date translator that ships with the package (lesson 01 draws its map) and the script that made it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import attention_helpers as ah
from attention_helpers import dates

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "train_date_model.py"
# A run small enough for a test: the sizes differ from the shipped model's, so loading must read them from the file.
SMALL = (
    "--d-model 16 --num-heads 2 --num-encoder-layers 1 --num-decoder-layers 2 --ffn-hidden 24 "
    "--num-steps 4 --warmup-steps 2 --batch-size 8 --num-train 64 --num-heldout 16 --seed 5"
)
LESSON_01_SOURCES = ["November 24, 2026", "24/11/2026"]


@pytest.fixture(scope="module")
def translator():
    return ah.pretrained_date_translator()


@pytest.fixture(scope="module")
def heldout():
    return dates.make_dates(num_train=20_000, num_heldout=1_000, seed=123)  # lesson 12's data


def run_script(out: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *SMALL.split(), "--out", str(out)], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.slow
def test_the_script_trains_repeatably_and_writes_weights_that_load_into_a_working_model(tmp_path):
    first, second = tmp_path / "a" / "dates.pt", tmp_path / "b" / "dates.pt"
    stdout = run_script(first)
    run_script(second)
    assert "held-out exact match of the saved weights:" in stdout

    saved = torch.load(first, weights_only=True)
    assert saved["sizes"] == dict(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=2, ffn_hidden=24)
    assert {p.dtype for p in saved["parameters"].values()} == {torch.float16}, "weights are stored in float16"
    again = torch.load(second, weights_only=True)["parameters"]
    for name, value in saved["parameters"].items():
        assert torch.equal(value, again[name]), f"two runs with the same settings differ in {name}"

    model = ah.pretrained_date_translator(first)
    assert not model.training
    assert len(model.transformer.encoder.layers) == 1 and len(model.transformer.decoder_layers) == 2
    for name, p in model.named_parameters():
        assert p.dtype == torch.float32 and torch.equal(p, saved["parameters"][name].float()), name
    torch.manual_seed(5)  # the script's seed: the weights it would start from
    vocab_size = dates.DateTokenizer().vocab_size
    initial = ah.Seq2SeqTransformer(
        ah.Seq2SeqConfig(
            src_vocab_size=vocab_size,
            tgt_vocab_size=vocab_size,
            d_model=16,
            num_heads=2,
            num_encoder_layers=1,
            num_decoder_layers=2,
            ffn_hidden=24,
        )
    )
    trained = model.lm_head.weight
    assert not torch.allclose(trained, initial.lm_head.weight.half().float()), "4 Adam steps must move the weights"

    texts, maps = ah.translate_dates(model, ["7 May 1901", "May 7, 1901"])
    assert [len(text) for text in texts] == [dates.TARGET_LEN] * 2
    assert [tuple(m.shape) for m in maps] == [(10, 10), (10, 11)]


def test_a_file_without_the_models_parameters_is_refused_by_name(tmp_path):
    path = tmp_path / "dates.pt"
    run_script(path)
    saved = torch.load(path, weights_only=True)
    saved["parameters"]["extra.weight"] = saved["parameters"].pop("lm_head.weight")
    torch.save(saved, path)
    with pytest.raises(ValueError, match=r"missing \['lm_head.weight'\], unexpected \['extra.weight'\]"):
        ah.pretrained_date_translator(path)


def test_the_shipped_weights_are_small_float16_and_lesson_12s_model():
    assert dates.PRETRAINED_WEIGHTS.stat().st_size < 400_000, "the shipped weights should stay a few hundred KB"
    saved = torch.load(dates.PRETRAINED_WEIGHTS, weights_only=True)
    assert saved["sizes"] == dict(d_model=64, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, ffn_hidden=128)
    assert {p.dtype for p in saved["parameters"].values()} == {torch.float16}


def test_the_shipped_translator_writes_lesson_12s_held_out_dates_right(translator, heldout):
    """Measured when the weights were made: 1,000 of 1,000 (tools/train_date_model.py prints it). Another CPU's
    vector kernels change the last bits of the float32 maths, hence the margin."""
    predicted = ah.greedy_decode(translator, heldout.heldout_src, heldout.tokenizer.bos_id, dates.TARGET_LEN)
    assert dates.exact_match(predicted, heldout.heldout_tgt[:, 1:]) >= 0.995


def test_translate_dates_gives_each_steps_last_layer_weights_averaged_over_heads(translator, heldout):
    """The maps are the weights a teacher-forced pass over the model's own output computes (no cache), rows sum
    to 1 and padding gets none."""
    texts = heldout.heldout_texts[:6]
    written, maps = ah.translate_dates(translator, texts)
    tokenizer = dates.DateTokenizer()
    src = tokenizer.encode(texts)
    tgt = tokenizer.encode([dates.BOS + text for text in written])[:, :-1]  # (6, 10): what each step read
    with torch.no_grad():
        _, weights = translator(src, tgt, return_weights=True)  # (num_layers, 6, num_heads, 10, src_len)
    for i, (text, m) in enumerate(zip(texts, maps, strict=True)):
        assert m.shape == (dates.TARGET_LEN, len(text))
        expected = weights[-1, i, :, :, : len(text)].mean(dim=0)
        torch.testing.assert_close(m, expected, atol=1e-5, rtol=0)
        torch.testing.assert_close(m.sum(dim=1), torch.ones(dates.TARGET_LEN), atol=1e-5, rtol=0)
    with pytest.raises(TypeError, match="wrap a single date in a list"):
        ah.translate_dates(translator, "24/11/2026")


def test_the_month_digits_look_at_the_month_as_lesson_01_says(translator, heldout):
    """Lesson 01: the month's digits look at the month's name (or its two digits), the day's at the day. Measured
    on the shipped weights: over held-out inputs with the month written in full or as digits, the month rows put
    0.88-0.90 of their weight on the input's month on average, at least 0.65 on each input; in lesson 01's two
    examples, at least 0.80 on each month row and 0.99 on each day row."""
    in_lesson = dict(zip(LESSON_01_SOURCES, ah.translate_dates(translator, LESSON_01_SOURCES)[1], strict=True))
    no_weekday = [text for text in heldout.heldout_texts if dates.format_of(text) != 2]
    _, maps = ah.translate_dates(translator, no_weekday)
    shares = []
    for text, m in [*zip(no_weekday, maps, strict=True), *in_lesson.items()]:
        month = dates.source_fields(text)["month"]
        shares.append(m[dates.TARGET_FIELDS["month"]][:, month].sum(dim=1).mean().item())
    assert sum(shares) / len(shares) > 0.8 and min(shares) > 0.55, (sum(shares) / len(shares), min(shares))
    for text, m in in_lesson.items():
        fields = dates.source_fields(text)
        month_rows = m[dates.TARGET_FIELDS["month"]][:, fields["month"]].sum(dim=1)
        day_rows = m[dates.TARGET_FIELDS["day"]][:, fields["day"]].sum(dim=1)
        assert (month_rows > 0.7).all() and (day_rows > 0.9).all(), (text, month_rows, day_rows)
