"""runtime/metrics.py: how much of the validation set an evaluation says it covered, throughput and latency figures
(against the formulas worked by hand), the warning for figures that include the warm-up."""

import math

import numpy as np
import pytest

from runtime.metrics import (ThroughputMeter, TrainStats, evaluated_images_line, few_batch_norm_values_warning,
                             latency_percentiles, require_evaluated)
from utils.errors import UserError


def test_evaluation_line_counts_the_dropped_partial_batch():
    assert evaluated_images_line(9984, 10000, 1, "epoch", 32) == \
        "Evaluated 9,984 of 10,000 images (the last partial batch of 16 is dropped, as the original)"
    assert evaluated_images_line(64, 64, 1, "epoch", 32) == "Evaluated 64 of 64 images"
    assert evaluated_images_line(9984 * 2, 10000, 2, "epoch", 32) == \
        "Evaluated 19,968 of 20,000 images (2 epochs of 10,000 in whole batches of 32: 32 left out, as the original)"
    assert evaluated_images_line(96, 10000, 1, "batch", 32) == \
        "Evaluated 96 images (3 batches of 32) of the 10,000 in the validation set"


def test_evaluation_line_in_batches_past_the_validation_set_says_the_repeated_images():
    """--iter_unit batch with more batches than the set holds: the input repeats it, as the original's, and the line
    says how many images were read again and that the accuracy counts them (it said nothing)."""
    assert evaluated_images_line(3000, 2000, 1, "batch", 500) == \
        "Evaluated 3,000 images (6 batches of 500) of the 2,000 in the validation set, 1,000 of them a second time " \
        "(the input repeats the set, as the original; top-1 and top-5 count every read)"
    assert evaluated_images_line(5000, 2000, 1, "batch", 500, skipped=2) == \
        "Evaluated 5,000 images (10 batches of 500) of the 2,000 in the validation set, 3,000 of them again in 2.5 " \
        "passes over the set (the input repeats the set, as the original; top-1 and top-5 count every read; 2 " \
        "skipped as corrupt, see the warnings above)"
    assert evaluated_images_line(2000, 2000, 1, "batch", 500) == \
        "Evaluated 2,000 images (4 batches of 500) of the 2,000 in the validation set"


def test_evaluation_line_tells_records_a_read_error_left_unread_from_the_partial_batch():
    """30 records, batch 10: a read error in record 7 of a 15-record shard loses it (1 skipped) and the 7 after it
    (never read: the reader took 23), the 22 delivered make 2 batches and a partial one of 2. Before, all 9 missing
    from 30 - 1 - 20 were called the last partial batch."""
    assert evaluated_images_line(20, 30, 1, "epoch", 10, skipped=1, read=23) == \
        "Evaluated 20 of 30 images (1 skipped as corrupt, see the warnings above; 7 more not read: a read error cut " \
        "a shard short (unreadable stream data); the last partial batch of 2 is dropped, as the original)"
    # Every record read: the reader's count changes nothing.
    assert evaluated_images_line(20, 30, 1, "epoch", 10, skipped=1, read=30) == \
        "Evaluated 20 of 30 images (1 skipped as corrupt, see the warnings above; the last partial batch of 9 is " \
        "dropped, as the original)"
    # Whole batches all delivered (the input did not end short): the reader may not have reached the last records.
    assert evaluated_images_line(20, 25, 1, "epoch", 10, read=21) == \
        "Evaluated 20 of 25 images (the last partial batch of 5 is dropped, as the original)"


def test_a_read_error_in_a_one_pass_input_is_counted_where_it_happened(tmp_path, capfd):
    """The pipeline's own counts (SkippedRecords.count and .read) on a shard whose record 7's payload is damaged."""
    from tests._data_helpers import corrupt_payload, write_tfrecord_shards
    from utils import data_utils
    paths = write_tfrecord_shards(str(tmp_path), "validation", 2, 15, 16, num_classes=11)
    corrupt_payload(paths[0], 7)
    skipped = data_utils.SkippedRecords()
    dataset = data_utils.get_tfrecords_input_fn(paths, 10, 16, 16, training=False, deterministic=True,
                                                num_classes=11, num_epochs=1, skipped=skipped)
    seen = sum(int(images.shape[0]) for images, _ in dataset)
    assert (seen, skipped.count, skipped.read) == (20, 1, 23)
    assert "WARNING: skipped 1 record(s) of unreadable stream data" in capfd.readouterr().err
    assert "7 more not read" in evaluated_images_line(seen, 30, 1, "epoch", 10, skipped.count, skipped.read)


def test_evaluation_line_counts_the_records_skipped_as_corrupt():
    assert evaluated_images_line(16, 24, 1, "epoch", 8, skipped=8) == \
        "Evaluated 16 of 24 images (8 skipped as corrupt, see the warnings above)"
    assert evaluated_images_line(96, 10000, 1, "batch", 32, skipped=2) == \
        "Evaluated 96 images (3 batches of 32) of the 10,000 in the validation set (2 skipped as corrupt, see the " \
        "warnings above)"
    # More missing than a partial batch: not blamed on the partial batch.
    assert evaluated_images_line(8, 24, 1, "epoch", 8, skipped=1) == \
        "Evaluated 8 of 24 images (1 skipped as corrupt, see the warnings above; 15 more not delivered by the " \
        "input, perhaps unreadable stream data)"


def test_throughput_of_a_run_not_longer_than_the_warmup_is_flagged():
    meter = ThroughputMeter(batch_size=8, warmup=5)
    for _ in range(5):
        meter.add(0.1)
    assert meter.warmup_warning() == (
        "WARNING: 5 step(s) ran, not more than --warmup_steps 5: the throughput and latency figures count all "
        "of them, warm-up included (run more than 5 steps for a steady-state figure)")
    meter.add(0.1)
    assert meter.warmup_warning() is None
    no_warmup = ThroughputMeter(batch_size=8, warmup=0)
    no_warmup.add(0.1)
    assert no_warmup.warmup_warning() is None


def test_throughput_is_the_mean_of_the_per_step_rates_after_the_warmup_and_the_total_rate():
    meter = ThroughputMeter(batch_size=8, warmup=1)
    for seconds in (2.0, 0.5, 0.25):  # the 2 s warm-up step is left out
        meter.add(seconds)
    assert meter.last_ips == 32.0
    summary = meter.summary("train")
    assert summary["train_throughput"] == pytest.approx((16 + 32) / 2)  # mean of 8/0.5 and 8/0.25
    assert summary["train_throughput_total"] == pytest.approx(16 / 0.75)  # 2 batches of 8 in 0.75 s
    # Not past the warm-up: every step counts.
    short = ThroughputMeter(batch_size=4, warmup=3)
    short.add(0.5)
    short.add(1.0)
    assert short.summary("eval") == pytest.approx({"eval_throughput": (8 + 4) / 2, "eval_throughput_total": 8 / 1.5})
    assert ThroughputMeter(4, 0).summary("eval") == {"eval_throughput": 0.0, "eval_throughput_total": 0.0}


def test_latency_percentiles_are_linear_interpolations_in_milliseconds():
    seconds = [0.001 * value for value in range(1, 11)]  # 1..10 ms
    # Linear interpolation between the sorted values: position q * (n - 1) = 8.1, 8.55, 8.91 (0-based).
    assert latency_percentiles(seconds, "eval_") == pytest.approx({
        "eval_latency_avg": 5.5, "eval_latency_p90": 9.1, "eval_latency_p95": 9.55, "eval_latency_p99": 9.91})
    assert latency_percentiles([]) == {}
    meter = ThroughputMeter(batch_size=1, warmup=2)
    for seconds in (5.0, 5.0, 0.002, 0.004):
        meter.add(seconds)
    assert meter.latencies()["eval_latency_avg"] == pytest.approx(3.0)  # the two 5 s warm-up steps left out


def test_an_evaluation_without_a_whole_batch_says_where_the_records_went():
    require_evaluated(8, 24, 8, 16)  # a whole batch evaluated: fine
    with pytest.raises(UserError, match=r"^no whole batch of 8 validation images could be read: 11 of the 12 "
                                        r"records were skipped as corrupt \(see the warnings above\)$"):
        require_evaluated(0, 12, 8, 11)
    # 20 of 24 neither evaluated nor reported corrupt: more than a batch, so not blamed on the partial batch.
    with pytest.raises(UserError, match=r"^no whole batch of 8 validation images could be read: 4 of the 24 records "
                                        r"were skipped as corrupt and 20 were not delivered by the input, perhaps "
                                        r"unreadable stream data \(see the warnings above\)$"):
        require_evaluated(0, 24, 8, 4)


def test_a_blow_up_of_the_weights_is_warned_about_once_while_the_loss_is_still_finite():
    """ResNet-50 at 32 px, batch 2, the default rate: the L2 term went 2.25 -> 6.6e8 in one step, the loss stayed
    finite, and the run ended with status 0 and a model that computes NaN (2026-12-05)."""
    stats = TrainStats(dynamic_loss_scaling=False, max_skipped=3)
    lines = [stats.check({"total_loss": 7.0, "l2_loss": l2}, step)
             for step, l2 in enumerate([2.2547, 2.2549, 6.5933e8, 7e10, 1e14], start=1)]
    assert lines == [None, None, "WARNING: at step 3 the weights' L2 term jumped from 2.255 to 6.593e+08 in one step: "
                     "the training is diverging, and a model this far gone computes garbage or NaN (lower --lr_init, "
                     "or raise --batch_size: batch norm over a few images is unstable)", None, None]
    healthy = TrainStats(dynamic_loss_scaling=False, max_skipped=3)  # weight decay's drift, and no weight decay
    assert [healthy.check({"total_loss": 2.0, "l2_loss": l2}, step) for step, l2 in
            enumerate([2.25, 2.2, 0.0, 0.0, 2.0, 1.9], start=1)] == [None] * 6


def test_the_weights_a_checkpoint_holds_are_checked_after_the_last_update():
    """A 2-step run at batch 2: step 2's update blew the weights up, no step saw it (each step sees the weights it
    started from), and its checkpoint evaluated every image as non-finite with no word on why (2026-12-07)."""
    stats = TrainStats(dynamic_loss_scaling=False, max_skipped=3)
    assert [stats.check({"total_loss": 7.0, "l2_loss": l2}, step) for step, l2 in ((1, 2.2557), (2, 2.2557))] \
        == [None, None]
    assert stats.check_weights(9.633e6, 2) == (
        "WARNING: at step 2 the weights' L2 term jumped from 2.256 to 9.633e+06 in one step: the training is "
        "diverging, and a model this far gone computes garbage or NaN (lower --lr_init, or raise --batch_size: batch "
        "norm over a few images is unstable)")
    assert stats.diverged == {"step": 2, "sign": "the weights' L2 term jumped from 2.256 to 9.633e+06 in one step"}
    assert stats.check({"total_loss": 7.0, "l2_loss": 9.633e6}, 3) is None  # the next step starts from them
    healthy = TrainStats(dynamic_loss_scaling=False, max_skipped=3)
    healthy.check({"total_loss": 7.0, "l2_loss": 2.2557}, 1)
    assert healthy.check_weights(2.2551, 1) is None and healthy.diverged is None


@pytest.mark.parametrize("batch, side, image_size, values, fewest", [(2, 1, 32, 2, 16), (15, 1, 32, 15, 16),
                                                                      (3, 2, 64, 12, 4)])
def test_batch_norm_over_fewer_than_16_values_a_channel_is_warned_about(batch, side, image_size, values, fewest):
    assert few_batch_norm_values_warning(batch, side, image_size) == (
        f"WARNING: at {image_size}x{image_size} the last stage's feature maps are {side}x{side}, so its batch norm "
        f"normalises each channel over {values} values ({batch} images a replica x {side}x{side}); below 16 its "
        "gradients are unstable and the training tends to diverge: use a --batch_size of at least "
        f"{fewest} a replica, or larger images")


@pytest.mark.parametrize("batch, side", [(16, 1), (4, 2), (1, 7)])
def test_batch_norm_over_16_values_or_more_is_not_warned_about(batch, side):
    assert few_batch_norm_values_warning(batch, side, 224) is None


def test_a_collapse_to_uniform_outputs_is_warned_about_once():
    """10 classes: the loss learns down to 1.2, then sits at ln(10) (a model giving every class 1/10, the quick
    start's recipe at the ImageNet rate 0.256) for COLLAPSE_STEPS steps: one warning, at the 100th such step."""
    from runtime.metrics import COLLAPSE_STEPS
    rng = np.random.default_rng(0)
    uniform = math.log(10)
    losses = list(np.linspace(3.7, 1.2, 50)) + [1.5, 2.0] + list(uniform + rng.uniform(-1e-4, 1e-4, 150))
    stats = TrainStats(dynamic_loss_scaling=False, max_skipped=3, num_classes=10)
    lines = [stats.check({"total_loss": 3.0, "cross_entropy": loss}, step) for step, loss in enumerate(losses, 1)]
    warnings = [(step, line) for step, line in enumerate(lines, 1) if line]
    assert [step for step, _ in warnings] == [52 + COLLAPSE_STEPS]
    assert warnings[0][1] == (
        "WARNING: the cross-entropy has stayed at ln(10) = 2.303, the loss of a model that gives every class the same "
        "probability, since step 53 (100 steps), after it had reached 1.2: the training has collapsed and its "
        "checkpoints predict nothing (lower --lr_init)")


def test_no_collapse_warning_at_a_runs_start_or_while_the_loss_moves():
    """The first steps of an ImageNet run sit at ln(1000) before they learn: not a collapse. Nor is a loss that
    passes through ln(classes), or one that stays 2% away from it, or a run without the class count."""
    uniform = math.log(1000)
    start = TrainStats(dynamic_loss_scaling=False, max_skipped=3, num_classes=1000)
    assert not any(start.check({"total_loss": 7.0, "cross_entropy": uniform + 0.001 * (step % 3)}, step)
                   for step in range(1, 500))
    for losses in ([2.0] * 10 + [math.log(10) * 1.02] * 300,  # near, not at
                   [2.0] * 10 + [math.log(10)] * 99 + [2.0] + [math.log(10)] * 99):  # broken runs of 99
        stats = TrainStats(dynamic_loss_scaling=False, max_skipped=3, num_classes=10)
        assert not any(stats.check({"total_loss": 3.0, "cross_entropy": loss}, step)
                       for step, loss in enumerate(losses, 1))
    unknown = TrainStats(dynamic_loss_scaling=False, max_skipped=3)
    assert not any(unknown.check({"total_loss": 3.0, "cross_entropy": loss}, step)
                   for step, loss in enumerate([1.0] + [math.log(10)] * 300, 1))


def test_a_cross_entropy_far_above_ln_classes_for_three_steps_is_warned_about_once_and_recorded():
    """ResNet-50, 10 classes, 40 px, batch 8, --lr_init 50 (2026-12-06): the cross-entropy went 4.8, 4.5, 37.6, 186,
    45.8, 110 while the L2 term grew 2.3 -> 157 over four steps (never 100x in one): finite, and nothing said."""
    stats = TrainStats(dynamic_loss_scaling=False, max_skipped=3, num_classes=10)
    run = [(4.84, 2.255), (4.48, 2.255), (37.6, 4.58), (186.0, 20.5), (45.8, 66.0), (110.0, 157.0), (90.0, 160.0)]
    lines = [stats.check({"total_loss": ce + l2, "cross_entropy": ce, "l2_loss": l2}, step)
             for step, (ce, l2) in enumerate(run, 1)]
    sign = ("the cross-entropy was 37.6, 186, 45.8 at steps 3-5, above 10, where a model that knows nothing has "
            "ln(10) = 2.303")  # 4 ln(10) = 9.2 is under the floor of 10
    assert lines == [None] * 4 + [f"WARNING: {sign}: the training is diverging, and its checkpoints give confident "
                                  "wrong answers (lower --lr_init, or raise --batch_size: batch norm over a few "
                                  "images is unstable)", None, None]
    assert stats.diverged == {"step": 3, "sign": sign}
    # 1001 classes: the limit is 4 ln(1001) = 27.6; a healthy start (6.9-8) and a two-step spike are no divergence.
    start = TrainStats(dynamic_loss_scaling=False, max_skipped=3, num_classes=1001)
    assert not any(start.check({"total_loss": 9.0, "cross_entropy": loss}, step)
                   for step, loss in enumerate([7.9, 7.2, 30.0, 29.0, 6.9, 27.0, 27.5, 6.9], 1))
    assert start.diverged is None


def test_the_first_divergence_seen_is_the_one_recorded():
    """An L2 jump at step 3 and then, from step 4, a cross-entropy far above ln(10): both warned, step 3 recorded."""
    stats = TrainStats(dynamic_loss_scaling=False, max_skipped=3, num_classes=10)
    run = [(2.3, 2.25), (2.2, 2.25), (2.2, 900.0), (50.0, 950.0), (60.0, 990.0), (70.0, 999.0)]
    lines = [stats.check({"total_loss": ce + l2, "cross_entropy": ce, "l2_loss": l2}, step)
             for step, (ce, l2) in enumerate(run, 1)]
    assert [step for step, line in enumerate(lines, 1) if line] == [3, 6]
    assert stats.diverged == {"step": 3, "sign": "the weights' L2 term jumped from 2.25 to 900 in one step"}


def test_a_training_that_recovers_from_its_divergence_stops_recording_it():
    """The README's fine-tune (lr 0.1 from a one-step stand-in, no warmup) went 10.8, 12.4, 13.4 at steps 10-12, then
    learned to 36.6% top-1: its checkpoints must not call that model garbage. RECOVERED_STEPS in a row under ln(10)
    clear the record; a step at or above it restarts the count. A resumed checkpoint's record is cleared the same
    way."""
    from runtime.metrics import RECOVERED_STEPS
    stats = TrainStats(dynamic_loss_scaling=False, max_skipped=3, num_classes=10)
    losses = [2.4] * 9 + [10.8, 12.4, 13.4] + [2.0] * (RECOVERED_STEPS - 1) + [2.31] + [2.0] * RECOVERED_STEPS
    lines = [stats.check({"total_loss": 3.0, "cross_entropy": loss}, step) for step, loss in enumerate(losses, 1)]
    said = [(step, line) for step, line in enumerate(lines, 1) if line]
    recovered_from = 12 + RECOVERED_STEPS + 1  # the first step of the unbroken run under ln(10)
    assert [step for step, _ in said] == [12, recovered_from + RECOVERED_STEPS - 1]
    assert said[1][1] == (f"Note: the cross-entropy has stayed under ln(10) = 2.303 for {RECOVERED_STEPS} steps, since "
                          f"step {recovered_from}: the training has recovered from its divergence at step 10, and its "
                          "checkpoints from here on no longer record it")
    assert stats.diverged is None
    resumed = TrainStats(dynamic_loss_scaling=False, max_skipped=3, num_classes=10,
                         diverged={"step": 10, "sign": "..."})
    assert [resumed.check({"total_loss": 3.0, "cross_entropy": 1.0}, step) is not None
            for step in range(1, RECOVERED_STEPS + 1)] == [False] * (RECOVERED_STEPS - 1) + [True]
    assert resumed.diverged is None


def test_a_dali_evaluation_that_drops_a_partial_batch_says_tf_data_drops_other_images():
    """DALI reads the validation files in order, tf.data interleaves them: with a partial batch dropped the two
    score different images (an audit measured 0.375 against 0.5 top-1 on 16 of 31 images, and 0.3548 for both on
    all 31). Nothing to say when nothing is dropped or there is one file."""
    from runtime.metrics import dali_drops_other_images_note
    assert dali_drops_other_images_note(15, 31, 2, 8) == (
        "Note: DALI reads the 2 validation files one after another, tf.data 8 records from each in turn, so the 15 "
        "images left out of the last partial batch are not the ones tf.data leaves out: to compare the two "
        "pipelines' accuracies, evaluate at a --batch_size that divides 31")
    assert dali_drops_other_images_note(0, 32, 2, 8) is None
    assert dali_drops_other_images_note(15, 31, 1, 8) is None


def test_a_top5_of_at_most_5_outputs_is_said_to_hold_every_class():
    """With 5 outputs or fewer every label is in the top 5: its accuracy is 1.0 whatever the model predicts (an
    audit's 3-class dataset reported top5 1.0 beside a top-1 of 0.35). Nothing to say from 6 outputs on."""
    from runtime.metrics import top5_of_few_outputs_note
    assert top5_of_few_outputs_note(3) == ("Note: top5_accuracy is 1.0 whatever the model predicts: it has 3 outputs, "
                                           "all of them in its top 5; top-1 is the figure that tells")
    assert top5_of_few_outputs_note(5, "accuracy_top5").startswith("Note: accuracy_top5 is 1.0 ")
    assert top5_of_few_outputs_note(6) is None and top5_of_few_outputs_note(1001) is None
