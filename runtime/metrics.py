"""What a run measures and checks as it goes (docs/ORIGINAL.md#logging): throughput and latency, the non-finite
loss checks of training, and how much of the validation set an evaluation covered."""

import math

import numpy as np

from utils.errors import UserError

LATENCY_QUANTILES = (0.9, 0.95, 0.99)


def latency_percentiles(seconds, prefix=""):
    """{prefix}latency_avg / _p90 / _p95 / _p99 in milliseconds of the step times `seconds` ({} when empty)."""
    times = np.asarray(seconds, dtype=np.float64) * 1000.0
    if times.size == 0:
        return {}
    results = {prefix + "latency_avg": float(np.mean(times))}
    for quantile in LATENCY_QUANTILES:
        results["{}latency_p{}".format(prefix, int(round(quantile * 100)))] = float(np.quantile(times, quantile))
    return results


class ThroughputMeter:
    """Per-step images/s after `warmup` steps (the original's statistic: the mean of per-step rates) and total
    images / total time (a statistic stalls cannot hide). When no step passed the warmup, all steps count."""

    def __init__(self, batch_size, warmup):
        self.batch_size = batch_size
        self.warmup = warmup
        self.times = []

    def add(self, seconds):
        self.times.append(max(seconds, 1e-9))

    @property
    def last_ips(self):
        return self.batch_size / self.times[-1]

    def _measured(self):
        return self.times[self.warmup:] if len(self.times) > self.warmup else self.times

    def warmup_warning(self):
        """The warning for figures that include the warm-up (no step ran after it), else None."""
        return warmup_warning(len(self.times), self.warmup)

    def summary(self, prefix):
        times = self._measured()
        if not times:
            return {prefix + "_throughput": 0.0, prefix + "_throughput_total": 0.0}
        return {
            prefix + "_throughput": float(np.mean([self.batch_size / t for t in times])),
            prefix + "_throughput_total": float(self.batch_size * len(times) / np.sum(times)),
        }

    def latencies(self):
        return latency_percentiles(self._measured(), "eval_")


# A weights' L2 term that grows this many times in one step: the weights blew up (weight decay and a sane rate
# change it by a fraction of a percent a step), even while the loss is still finite.
L2_JUMP = 100.0


# A model that predicts the same probability for every class has a cross-entropy of exactly ln(classes), whatever
# the batch and with label smoothing or mixup too (their targets sum to 1). Held within this fraction of it for
# COLLAPSE_STEPS steps in a row, after the run had got clearly below it (the first steps of a run sit there
# legitimately), the model has collapsed to uniform outputs: a slow divergence the L2 check does not see.
COLLAPSE_TOLERANCE = 0.01
COLLAPSE_STEPS = 100
COLLAPSE_LEARNED = 0.9  # "clearly below": under this fraction of ln(classes) once

# A cross-entropy this many times ln(classes) (and at least FAR_ABOVE_FLOOR), ln(classes) being the loss of a
# model that knows nothing, for FAR_ABOVE_STEPS steps in a row: the model is confidently wrong on every batch, a
# divergence the L2 check misses when the weights grow by less than L2_JUMP a step.
FAR_ABOVE_FACTOR = 4.0
FAR_ABOVE_FLOOR = 10.0
FAR_ABOVE_STEPS = 3
# A training that diverged has recovered once its cross-entropy stays under ln(classes) (better than knowing
# nothing) for this many steps in a row: its checkpoints from then on no longer record the divergence.
RECOVERED_STEPS = 20


# Batch norm normalising each channel over fewer values than this (per-replica batch x the last stage's map area)
# trains unstably: its gradients grow as the few values draw together (docs/TROUBLESHOOTING.md#messages).
BN_FEW_VALUES = 16


def few_batch_norm_values_warning(batch_size, map_side, image_size):
    """A WARNING line when a training's batch norm normalises each channel of the last stage over fewer than
    BN_FEW_VALUES values (`batch_size` images of each replica's batch, of `map_side` x `map_side` maps at
    `image_size`), else None."""
    values = batch_size * map_side * map_side
    if values >= BN_FEW_VALUES:
        return None
    fewest = -(-BN_FEW_VALUES // (map_side * map_side))
    return ("WARNING: at {0}x{0} the last stage's feature maps are {1}x{1}, so its batch norm normalises each "
            "channel over {2} values ({3} images a replica x {1}x{1}); below {4} its gradients are unstable and "
            "the training tends to diverge: use a --batch_size of at least {5} a replica, or larger "
            "images".format(image_size, map_side, values, batch_size, BN_FEW_VALUES, fewest))


class TrainStats:
    """Non-finite checks: in fp32 a non-finite loss stops the run; with dynamic loss scaling skipped steps are
    counted and `max_skipped` in a row stop it. A finite blow-up of the weights (the L2 term jumping L2_JUMP
    times in one step) and, given `num_classes`, a cross-entropy far above ln(classes) (FAR_ABOVE_*) and a collapse
    to uniform outputs (COLLAPSE_STEPS) are each warned about once: `check` returns the line, and `diverged` holds
    the first of them ({"step": N, "sign": what showed it}; given, the divergence a resumed checkpoint records) for
    the run's checkpoints to record, until the cross-entropy has stayed under ln(classes) for RECOVERED_STEPS
    (`check` then returns a Note and `diverged` is None again)."""

    def __init__(self, dynamic_loss_scaling, max_skipped, remedy="lower --lr_init or check the data",
                 num_classes=None, diverged=None):
        self.dynamic_loss_scaling = dynamic_loss_scaling
        self.max_skipped = max_skipped
        self.remedy = remedy
        self.skipped_total = 0
        self.skipped_in_a_row = 0
        self._last_l2 = None
        self._warned = False
        self._classes = num_classes
        self._uniform = math.log(num_classes) if num_classes and num_classes > 1 else None
        self._lowest = math.inf
        self._at_uniform_since = None  # the first step of the current run of steps at ln(classes)
        self._warned_collapse = False
        self._far_above = []  # the cross-entropies of the current run of steps far above ln(classes)
        self._warned_far_above = False
        self._below_since = None  # the first step of the current run of steps under ln(classes)
        self.diverged = diverged

    def check(self, values, step):
        self._check_finite(values, step)
        return (self._blow_up(values, step) or self._far_above_uniform(values, step) or self._collapse(values, step)
                or self._recovery(values, step))

    def check_weights(self, l2, step):
        """The blow-up check (WARNING line or None) of the weights' L2 term `l2` after step `step`'s update, which
        the next step's own check would see: a checkpoint of those weights is about to be written."""
        return self._blow_up({"l2_loss": l2}, step)

    def _recovery(self, values, step):
        if self.diverged is None or self._uniform is None or "cross_entropy" not in values:
            return None
        loss = float(values["cross_entropy"])
        if not (math.isfinite(loss) and loss < self._uniform):
            self._below_since = None
            return None
        if self._below_since is None:
            self._below_since = step
        if step - self._below_since + 1 < RECOVERED_STEPS:
            return None
        diverged, self.diverged = self.diverged, None
        return ("Note: the cross-entropy has stayed under ln({}) = {:.4g} for {} steps, since step {}: the training "
                "has recovered from its divergence at step {}, and its checkpoints from here on no longer record "
                "it".format(self._classes, self._uniform, RECOVERED_STEPS, self._below_since, diverged["step"]))

    def _record(self, step, sign):
        if self.diverged is None:
            self.diverged = {"step": int(step), "sign": sign}

    def _far_above_uniform(self, values, step):
        if self._uniform is None or self._warned_far_above or "cross_entropy" not in values:
            return None
        loss = float(values["cross_entropy"])
        limit = max(FAR_ABOVE_FACTOR * self._uniform, FAR_ABOVE_FLOOR)
        if not (math.isfinite(loss) and loss > limit):
            self._far_above = []
            return None
        self._far_above.append(loss)
        if len(self._far_above) < FAR_ABOVE_STEPS:
            return None
        self._warned_far_above = True
        first = step - FAR_ABOVE_STEPS + 1
        sign = "the cross-entropy was {} at steps {}-{}, above {:.3g}, where a model that knows nothing has ln({}) " \
               "= {:.4g}".format(", ".join("{:.4g}".format(value) for value in self._far_above), first, step, limit,
                                self._classes, self._uniform)
        self._record(first, sign)
        return ("WARNING: {}: the training is diverging, and its checkpoints give confident wrong answers (lower "
                "--lr_init, or raise --batch_size: batch norm over a few images is unstable)".format(sign))

    def _collapse(self, values, step):
        if self._uniform is None or self._warned_collapse or "cross_entropy" not in values:
            return None
        loss = float(values["cross_entropy"])
        if not math.isfinite(loss):
            return None
        if abs(loss - self._uniform) > COLLAPSE_TOLERANCE * self._uniform:
            self._at_uniform_since = None
            self._lowest = min(self._lowest, loss)
            return None
        if self._at_uniform_since is None:
            self._at_uniform_since = step
        if self._lowest < COLLAPSE_LEARNED * self._uniform and step - self._at_uniform_since + 1 >= COLLAPSE_STEPS:
            self._warned_collapse = True
            self._record(self._at_uniform_since, "the cross-entropy stayed at ln({}), uniform outputs, for {} steps "
                         "after it had reached {:.4g}".format(self._classes, step - self._at_uniform_since + 1,
                                                              self._lowest))
            return ("WARNING: the cross-entropy has stayed at ln({}) = {:.4g}, the loss of a model that gives every "
                    "class the same probability, since step {} ({} steps), after it had reached {:.4g}: the training "
                    "has collapsed and its checkpoints predict nothing (lower --lr_init)".format(
                        self._classes, self._uniform, self._at_uniform_since,
                        step - self._at_uniform_since + 1, self._lowest))
        return None

    def _blow_up(self, values, step):
        if "l2_loss" not in values:
            return None
        l2, last = float(values["l2_loss"]), self._last_l2
        self._last_l2 = l2
        if not self._warned and last and math.isfinite(l2) and l2 > L2_JUMP * last:
            self._warned = True
            self._record(step, "the weights' L2 term jumped from {:.4g} to {:.4g} in one step".format(last, l2))
            return ("WARNING: at step {} the weights' L2 term jumped from {:.4g} to {:.4g} in one step: the training "
                    "is diverging, and a model this far gone computes garbage or NaN (lower --lr_init, or raise "
                    "--batch_size: batch norm over a few images is unstable)".format(step, last, l2))
        return None

    def _check_finite(self, values, step):
        if self.dynamic_loss_scaling:
            if bool(values["skipped"]):
                self.skipped_total += 1
                self.skipped_in_a_row += 1
                if self.skipped_in_a_row >= self.max_skipped:
                    raise UserError("{} training steps in a row had non-finite gradients (last at step {}); "
                                    "stopping. The last checkpoint is kept.".format(self.skipped_in_a_row, step))
            else:
                self.skipped_in_a_row = 0
        elif not math.isfinite(float(values["total_loss"])):
            raise UserError("the loss became {} at step {}; stopping. The last good checkpoint is kept "
                            "({}).".format(float(values["total_loss"]), step, self.remedy))


def require_evaluated(seen, num_samples, batch_size, skipped):
    """A UserError when a finite evaluation of real data got no whole batch (so no accuracy to report)."""
    if seen > 0:
        return
    text = "no whole batch of {} validation images could be read: {:,} of the {:,} records were skipped as " \
        "corrupt".format(batch_size, skipped, num_samples)
    undelivered = num_samples - skipped
    if undelivered >= batch_size:  # the input ended early without naming them (a shard's stream unreadable)
        text += " and {:,} were not delivered by the input, perhaps unreadable stream data".format(undelivered)
    raise UserError(text + " (see the warnings above)")


def top5_of_few_outputs_note(num_outputs, key="top5_accuracy"):
    """The note for a model of at most 5 outputs, whose top 5 holds every class: its top-5 accuracy is 1.0 whatever
    it predicts (a 3-class dataset trained at --num_classes 3), which the figure alone does not say. None otherwise."""
    if num_outputs is None or num_outputs > 5:
        return None
    return ("Note: {} is 1.0 whatever the model predicts: it has {} outputs, all of them in its top 5; "
            "top-1 is the figure that tells".format(key, num_outputs))


def dali_drops_other_images_note(dropped, num_samples, num_files, interleave_block):
    """The note of a DALI evaluation of several validation files whose last partial batch of `dropped` images was
    left out: DALI reads the files one after another, tf.data `interleave_block` records from each in turn, so the two
    pipelines leave out different images and their accuracies are of different sets. None where they are the same
    (nothing dropped, one file)."""
    if dropped <= 0 or num_files < 2:
        return None
    return ("Note: DALI reads the {} validation files one after another, tf.data {} records from each in turn, so the "
            "{:,} images left out of the last partial batch are not the ones tf.data leaves out: to compare the two "
            "pipelines' accuracies, evaluate at a --batch_size that divides {:,}".format(
                num_files, interleave_block, dropped, num_samples))


def evaluated_images_line(seen, num_samples, num_epochs, iter_unit, batch_size, skipped=0, read=None):
    """How much of the validation set an evaluation covered. Batches are whole (drop_remainder, as the original),
    so up to batch_size - 1 images of every pass are left out. `skipped`: records the input dropped as corrupt
    (an evaluation in epochs reads each record once per epoch, so `seen` counts distinct images); `read`: records
    the reader took from the files (SkippedRecords.read), which tells the records a read error left unread from
    the last partial batch once a one-pass input ended short."""
    corrupt = "{:,} skipped as corrupt, see the warnings above".format(skipped) if skipped else None
    if iter_unit != "epoch":
        line = "Evaluated {:,} images ({:,} batches of {}) of the {:,} in the validation set".format(
            seen, seen // batch_size, batch_size, num_samples)
        notes = [corrupt] if corrupt else []
        again = seen - num_samples
        if again > 0 and num_samples > 0:
            # More batches than the set holds: the input repeats it (as the original's), so images past the first
            # pass are read again and the accuracy counts every read.
            line += ", {:,} of them a second time".format(again) if again <= num_samples else \
                ", {:,} of them again in {:.3g} passes over the set".format(again, seen / num_samples)
            notes.insert(0, "the input repeats the set, as the original; top-1 and top-5 count every read")
        return line + " ({})".format("; ".join(notes)) if notes else line
    total = num_samples * num_epochs
    notes = [corrupt] if corrupt else []
    dropped = total - skipped - seen
    ended_short = seen < total // batch_size * batch_size  # the input ended: every record it could read was read
    if num_epochs == 1 and ended_short and read is not None and read < total:
        notes.append("{:,} more not read: a read error cut a shard short (unreadable stream data)".format(
            total - read))
        dropped = read - skipped - seen
        if dropped > 0:
            notes.append("the last partial batch of {:,} is dropped, as the original".format(dropped))
    elif 0 < dropped < batch_size and num_epochs == 1:
        notes.append("the last partial batch of {:,} is dropped, as the original".format(dropped))
    elif dropped > 0 and num_epochs == 1:
        # More than a partial batch missing from one pass: the input ended early without naming them.
        notes.append("{:,} more not delivered by the input, perhaps unreadable stream data".format(dropped))
    elif dropped > 0:
        notes.append("{:,} epochs of {:,} in whole batches of {}: {:,} left out, as the original".format(
            num_epochs, num_samples, batch_size, dropped))
    line = "Evaluated {:,} of {:,} images".format(seen, total)
    return line + " ({})".format("; ".join(notes)) if notes else line


# Why a model computes non-finite outputs, for the lines that report them (evaluation, predict, inference.py).
NON_FINITE_CAUSES = ("the model is not usable as it stands (trained for only a few steps, its BN moving statistics "
                     "not settled, or its training diverged)")


def non_finite_warning(count, seen):
    """The line of an evaluation in which `count` of `seen` images got non-finite outputs (counted as misses)."""
    return "WARNING: {:,} of {:,} evaluated images got non-finite outputs and count as misses: {}".format(
        count, seen, NON_FINITE_CAUSES)


def warmup_warning(steps, warmup, flag="--warmup_steps"):
    """The warning for throughput and latency figures of `steps` steps that include the warm-up (no step ran after
    the `warmup` steps `flag` leaves out), else None."""
    if not 0 < steps <= warmup:
        return None
    return ("WARNING: {} step(s) ran, not more than {} {}: the throughput and latency figures count all of them, "
            "warm-up included (run more than {} steps for a steady-state figure)".format(steps, flag, warmup, warmup))
