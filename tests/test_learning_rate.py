"""LR schedule against the formulas of docs/ORIGINAL.md#learning-rate, written independently here in plain Python."""

import math

import pytest

from utils import learning_rate
from utils.learning_rate import learning_rate_schedule


def reference_lr(t, lr_init, global_batch, steps_per_epoch, warmup_epochs, decay_steps, cosine):
    lr0 = lr_init * global_batch / 256
    warmup = int(steps_per_epoch * warmup_epochs)
    if t < warmup:
        return lr0 * t / warmup
    if cosine:
        return lr0 * 0.5 * (1 + math.cos(math.pi * min(t, decay_steps) / decay_steps))
    boundaries = [int(steps_per_epoch * e) for e in (30, 60, 80, 90)]
    values = [lr0, lr0 * 0.1, lr0 * 0.01, lr0 * 0.001, lr0 * 0.0001]
    for boundary, value in zip(boundaries, values):
        if t <= boundary:
            return value
    return values[-1]


def lr(t, **kw):
    return float(learning_rate_schedule(t, **kw).numpy())


STEP = dict(lr_init=0.256, global_batch_size=2048, steps_per_epoch=100.0, warmup_epochs=8,
            num_decay_steps=9000, use_cosine=False)


@pytest.mark.parametrize("t", [0, 1, 400, 799, 800, 801, 3000, 3001, 6000, 6001, 8000, 8001, 9000, 9001, 20000])
def test_step_schedule_matches_formula(t):
    expected = reference_lr(t, 0.256, 2048, 100.0, 8, 9000, False)
    assert lr(t, **STEP) == pytest.approx(expected, rel=1e-6)


def test_warmup_starts_at_zero_and_base_lr_scales_with_global_batch():
    assert lr(0, **STEP) == 0.0
    assert lr(800, **STEP) == pytest.approx(2.048, rel=1e-6)  # docs/ORIGINAL.md#learning-rate: 0.256 * 2048 / 256
    # piecewise_constant: the boundary step itself still has the earlier value
    assert lr(3000, **STEP) == pytest.approx(2.048, rel=1e-6)
    assert lr(3001, **STEP) == pytest.approx(0.2048, rel=1e-6)


COSINE = dict(STEP, use_cosine=True)


@pytest.mark.parametrize("t", [0, 5, 799, 800, 801, 4500, 8999, 9000, 12000])
def test_cosine_is_anchored_at_step_zero(t):
    expected = reference_lr(t, 0.256, 2048, 100.0, 8, 9000, True)
    assert lr(t, **COSINE) == pytest.approx(expected, rel=1e-5, abs=1e-6)  # float32 near zero


def test_cosine_drops_at_end_of_warmup_and_reaches_zero():
    lr0 = 2.048
    before = lr(799, **COSINE)
    at = lr(800, **COSINE)
    assert before == pytest.approx(lr0 * 799 / 800, rel=1e-6)
    assert at == pytest.approx(lr0 * 0.5 * (1 + math.cos(math.pi * 800 / 9000)), rel=1e-6)
    assert at < before
    assert lr(9000, **COSINE) == pytest.approx(0.0, abs=1e-7)


def test_batch_unit_decay_steps_quirk():
    # iter_unit=batch: steps_per_epoch is the run length (500 steps -> "1 epoch"), boundaries follow it.
    kw = dict(lr_init=0.1, global_batch_size=256, steps_per_epoch=500.0, warmup_epochs=0, num_decay_steps=45000,
              use_cosine=False)
    assert lr(100, **kw) == pytest.approx(0.1)
    assert lr(15001, **kw) == pytest.approx(0.01)


@pytest.mark.parametrize("steps_per_epoch, warmup_epochs, num_steps, expected", [
    (281.0, 5, 281, (1405, 280 / 1405)),  # 1 epoch of the quick start's 9,000 images, the default warmup
    (6.0, 5, 6, (30, 5 / 30)),
    (6.0, 1, 6, (6, 5 / 6)),                # W = the run: the last step (t = 5) still warms up
    (6.0, 1, 7, None),                      # step 6 trains at the peak
    (281.25, 0, 281, None)])
def test_warmup_reach_is_the_last_steps_fraction_of_the_peak_when_warmup_lasts_the_run(
        steps_per_epoch, warmup_epochs, num_steps, expected):
    from utils.learning_rate import warmup_reach
    assert warmup_reach(steps_per_epoch, warmup_epochs, num_steps) == expected
    if expected is not None:  # the schedule's own rate at the last step, over lr0
        last = reference_lr(num_steps - 1, 0.1, 256, steps_per_epoch, warmup_epochs, 10 ** 6, True) / 0.1
        assert last == pytest.approx(expected[1])


def test_the_share_of_the_peak_a_warmup_reaches_never_reads_100_percent():
    """A warmup of W steps over a run of W steps ends at (W - 1) / W of the peak: 2,249 of 2,250 steps rounded to
    "100%" would contradict the rest of the line (the peak is never reached)."""
    assert learning_rate.percent_of_peak(5 / 30) == "17%"
    assert learning_rate.percent_of_peak(0.994) == "99%"
    assert learning_rate.percent_of_peak(2249 / 2250) == "99.9%"
    assert learning_rate.percent_of_peak(1 - 1e-9) == "99.9%"
