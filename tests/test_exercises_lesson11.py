"""Lesson 11's exercise checks: the online-softmax update on hidden rows, and grouped-query conversion."""

import copy
import functools

import torch

import attention_helpers as ah
from attention_helpers.lessons import lesson11 as checks

NOT_ANSWERED = "Not answered yet (the answer is still None).\n"


def verdict(capsys, check, *args, **kwargs):
    result = check(*args, **kwargs)
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return result, out


def update(running_max, running_sum, block):
    new_max = torch.maximum(running_max, block.max())
    shift = new_max if torch.isfinite(new_max) else torch.zeros(())
    return new_max, running_sum * torch.exp(running_max - shift) + torch.exp(block - shift).sum()


def test_online_softmax_update(capsys):
    assert verdict(capsys, checks.exercise_1, None) == (False, "Exercise 1: " + NOT_ANSWERED)
    ok, out = verdict(capsys, checks.exercise_1, update)
    assert ok and out.startswith("Exercise 1: correct")

    def nan_on_empty_block(running_max, running_sum, block):
        new_max = torch.maximum(running_max, block.max())
        return new_max, running_sum * torch.exp(running_max - new_max) + torch.exp(block - new_max).sum()

    def no_max(running_max, running_sum, block):
        return torch.maximum(running_max, block.max()), running_sum + torch.exp(block).sum()

    for wrong, reason in (
        (nan_on_empty_block, "block of only -inf"),
        (functools.partial(checks._update, rescale="none"), "not rescaled"),
        (functools.partial(checks._update, rescale="inverted"), "the wrong way round"),
        (no_max, "subtract the running maximum inside exp"),
        (lambda running_max, running_sum, block: running_sum, "not a pair"),
        (lambda running_max, running_sum, block: (None, None), "not a pair (running_max, running_sum) of two numbers"),
        (
            lambda running_max, running_sum, block: ("max", "sum"),
            "not a pair (running_max, running_sum) of two numbers",
        ),
        (lambda running_max, running_sum, block: (1, 2, 3), "not a pair"),
        (lambda running_max, running_sum, block: 1 / 0, "raised ZeroDivisionError"),
    ):
        ok, out = verdict(capsys, checks.exercise_1, wrong)
        assert not ok and "not yet" in out and reason in out and "Hint: " in out


def small_model_and_losses():
    torch.manual_seed(0)
    model = ah.GPT(
        ah.GPTConfig(vocab_size=20, context_length=8, d_model=16, num_heads=4, num_layers=2, dropout=0.0)
    ).eval()  # untrained, with large weights so that grouping changes the loss
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    held_out_ids = torch.randint(0, 20, (200,), generator=torch.Generator().manual_seed(0))
    grouped = copy.deepcopy(model)
    for block in grouped.blocks:
        block.attention = checks.reference_to_grouped(block.attention, 2)
    return model, held_out_ids, ah.evaluate_loss(model, held_out_ids, 8), ah.evaluate_loss(grouped, held_out_ids, 8)


def test_grouped_query_conversion(capsys):
    model, held_out_ids, before, after = small_model_and_losses()
    convert = checks.reference_to_grouped
    assert verdict(capsys, checks.exercise_2, None, None, model, held_out_ids, 2) == (
        False,
        "Exercise 2: " + NOT_ANSWERED,
    )
    ok, out = verdict(capsys, checks.exercise_2, convert, (before, after), model, held_out_ids, 2)
    assert ok and out.startswith("Exercise 2: correct")
    for to_grouped, answer, reason in (
        (functools.partial(convert, how="first"), (before, after), "the first head of its group"),
        (functools.partial(convert, how="strided"), (before, after), "the groups are heads h, h + num_kv_heads"),
        (functools.partial(convert, how="summed"), (before, after), "the sum of its group's heads"),
        (
            lambda attention, n: attention,
            (before, after),
            "num_kv_heads=2, not a GroupedQueryAttention with num_kv_heads=6",
        ),
        (convert, (after, before), "swapped"),
        (convert, (before, before), "was not converted"),
        (convert, (before + 0.1, after), "loss_before is not"),
    ):
        ok, out = verdict(capsys, checks.exercise_2, to_grouped, answer, model, held_out_ids, 2)
        assert not ok and "not yet" in out and reason in out and "Hint: " in out


def test_a_model_converted_in_place_is_named(capsys):
    model, held_out_ids, before, after = small_model_and_losses()
    for block in model.blocks:
        block.attention = checks.reference_to_grouped(block.attention, 2)
    ok, out = verdict(capsys, checks.exercise_2, checks.reference_to_grouped, (before, after), model, held_out_ids, 2)
    assert not ok and "changed it in place" in out


def test_the_block_maximum_in_place_of_the_running_maximum_is_rejected(capsys):
    def block_maximum(running_max, running_sum, block):
        new_max = block.max()  # the block's own maximum, not the largest seen so far
        shift = new_max if torch.isfinite(new_max) else torch.zeros(())
        old = running_sum * torch.exp(running_max - shift) if torch.isfinite(running_max) else running_sum
        return new_max, old + torch.exp(block - shift).sum()

    ok, out = verdict(capsys, checks.exercise_1, block_maximum)
    assert not ok and "follows each block's own maximum" in out and "largest score seen so far" in out


def test_a_converted_layer_sharing_modules_with_the_original_is_rejected(capsys):
    model, held_out_ids, before, after = small_model_and_losses()

    def shares(attention, num_kv_heads):
        converted = checks.reference_to_grouped(attention, num_kv_heads)
        converted.W_query, converted.out_proj = attention.W_query, attention.out_proj  # the same modules
        return converted

    ok, out = verdict(capsys, checks.exercise_2, shares, (before, after), model, held_out_ids, 2)
    assert not ok and "shares W_query.weight with the layer it was given" in out


def test_biases_left_as_initialised_are_named(capsys):
    model, held_out_ids, before, after = small_model_and_losses()

    def weights_only(attention, num_kv_heads):
        converted = checks.reference_to_grouped(attention, num_kv_heads)
        if converted.W_key.bias is not None:
            with torch.no_grad():
                converted.W_key.bias.zero_()
                converted.W_value.bias.zero_()
        return converted

    ok, out = verdict(capsys, checks.exercise_2, weights_only, (before, after), model, held_out_ids, 2)
    assert not ok and "W_key.bias differs" in out and "weights and biases, is the mean of the heads of its group" in out


def test_the_losses_are_named_as_the_lesson_names_them(capsys):
    """The lesson's stub sets `losses = (loss_before, loss_after)` (`answer` holds to_grouped): the verdicts say so."""
    model, held_out_ids, before, after = small_model_and_losses()
    convert = checks.reference_to_grouped
    ok, out = verdict(capsys, checks.exercise_2, convert, before, model, held_out_ids, 2)
    assert not ok and "losses must be a pair (loss_before, loss_after)" in out
    assert "Hint: losses = (loss_before, loss_after)" in out
    ok, out = verdict(capsys, checks.exercise_2, convert, (after, before), model, held_out_ids, 2)
    assert not ok and "Hint: losses = (loss_before, loss_after), in that order" in out


def test_online_softmax_with_its_pair_the_other_way_round_gets_its_own_hint(capsys):
    def swapped(running_max, running_sum, block):
        new_max = torch.maximum(running_max, block.max())
        shift = torch.where(torch.isneginf(new_max), torch.zeros_like(new_max), new_max)
        return running_sum * torch.exp(running_max - shift) + torch.exp(block - shift).sum(), new_max

    assert checks.exercise_1(swapped) is False
    out = capsys.readouterr().out
    assert "the other way round" in out and "return (running_max, running_sum)" in out


def test_a_running_maximum_that_stops_at_the_first_finite_block_is_rejected(capsys):
    """Its softmax is right on every hidden row (any shift gives it), but the running maximum is not the largest
    score seen so far: the check looks at it after every block."""

    def first_finite_maximum(running_max, running_sum, block):
        new_max = block.max() if bool(torch.isinf(running_max)) else running_max
        shift = new_max if torch.isfinite(new_max) else torch.zeros(())
        old = running_sum * torch.exp(running_max - shift) if torch.isfinite(running_max) else running_sum
        return new_max, old + torch.exp(block - shift).sum()

    ok, out = verdict(capsys, checks.exercise_1, first_finite_maximum)
    assert not ok and "running_max is" in out and "not the largest score seen so far" in out, out


def test_losses_copied_from_a_printout_to_two_decimals_are_accepted(capsys):
    model, held_out_ids, before, after = small_model_and_losses()
    assert abs(after - before) > 0.05, "the grouping must change the loss for the test to mean anything"
    rounded = (round(before, 2), round(after, 2))
    ok, out = verdict(capsys, checks.exercise_2, checks.reference_to_grouped, rounded, model, held_out_ids, 2)
    assert ok and out.startswith("Exercise 2: correct"), out


def test_the_layers_alone_are_judged_without_a_word_on_the_losses(capsys):
    """Given no model and no losses, the check judges the hidden layers only, and its verdict says no more."""
    ok, out = verdict(capsys, checks.exercise_2, checks.reference_to_grouped)
    assert ok and out == "Exercise 2: correct: the grouped layers are right.\n", out
    model, held_out_ids, before, after = small_model_and_losses()
    ok, out = verdict(capsys, checks.exercise_2, checks.reference_to_grouped, (before, after), model, held_out_ids, 2)
    assert ok and out == "Exercise 2: correct: the grouped layers are right, and both losses match the check's.\n", out
