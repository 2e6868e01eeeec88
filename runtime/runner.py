"""The Runner: train / evaluate / predict / benchmarks / SavedModel export (docs/ORIGINAL.md#modes).

A custom training loop replaces the original's Estimator. What it trains comes from
runtime/train_state.create_train_state: the model, the optimizer, the schedule, the averages and one `tf.function`
train step (XLA-compiled under `--xla`) that does forward, loss (smoothed CE + coupled L2), backward, loss scaling
and the TF1-momentum update and returns the numbers the logger needs. Host work per step is one fetch of a few
scalars. Evaluation, predict and export run the inference-built model (`Runner.inference_model`).
"""

import contextlib
import os
import shutil
import signal
import time

import tensorflow as tf

from model import checkpoint, export, resnet
from runtime import checkpoints, inputs, predict, runner_utils, settings, startup, train_state, train_step
from runtime.metrics import (ThroughputMeter, TrainStats, dali_drops_other_images_note, evaluated_images_line,
                             few_batch_norm_values_warning, non_finite_warning, require_evaluated,
                             top5_of_few_outputs_note)
from utils import data_utils, errors, learning_rate, losses
from utils.errors import StdoutWriteError, UserError, first_line
from utils.devices import Platform, cpu_bfloat16_support
from utils.distributed import SIGNAL_SYNC_EVERY
from utils.logger import LogWriteError, progress_enabled
from utils.output_paths import replaced_file
from utils.precision import Precision, cpu_bfloat16_note

SUMMARY_EVERY_STEPS = 100
# What a run stopped at once by a second signal leaves (StopRequest).
CHECKPOINT_KEPT = "the last complete checkpoint is kept: run the same command again to resume from it"
BENCHMARK_KEEPS = "a benchmark writes no checkpoint"


# The signals that stop a training run after its current step, with a checkpoint. SIGHUP is a closed terminal (or an
# ssh session that dropped): without it here the default action killed the run at once, losing up to
# --checkpoint_interval steps. SIGQUIT (Ctrl-\) keeps its default, a core dump: a user asks for that one on purpose.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP)


class StopRequest:
    """SIGTERM / SIGINT / SIGUSR1 / SIGHUP: finish the current step, checkpoint, stop. A second signal exits at once,
    with one line ending in `kept`: what is left of the run."""

    def __init__(self, kept, agree_every=None, say=print):
        self.say = say  # the run's notes (rank 0's alone under several workers: they would repeat it)
        self.requested = False
        self.signum = None  # the first signal received (None when a peer worker's stop ended the loop)
        self.kept = kept
        self.agree_every = agree_every  # several workers: the steps between their agreements to stop
        self.when = None  # when the run stops, if not at a step (said on the first signal)
        self._previous = {}

    def _handle(self, signum, frame):
        if self.requested:
            # At once, wherever the main thread is: the line is written straight to the descriptor (as a handler
            # may), and nothing is cleaned up. Checkpoints are renamed into place whole: the last complete one stays.
            try:
                os.write(2, "INTERRUPTED: main.py stopped by a second {}, at once; {}\n".format(
                    signal.Signals(signum).name, self.kept() if callable(self.kept) else self.kept).encode())
            except OSError:  # the terminal is gone (SIGHUP): the exit still happens
                pass
            os._exit(128 + signum)
        self.requested = True
        self.signum = signum
        if signum == signal.SIGHUP:
            errors.survive_a_closed_terminal()
        when = self.when or ("at the next step the workers agree on (they do every {} steps)".format(
            self.agree_every) if self.agree_every else "after the current step")
        print("Received signal {}: stopping {} (send it again to exit at once)".format(
            signal.Signals(signum).name, when), flush=True)

    def __enter__(self):
        errors.deliver_pending_interrupt()  # a signal from before the loop, still waiting for a line of ours
        for signum in STOP_SIGNALS:
            if signal.getsignal(signum) == signal.SIG_IGN:
                if signum == signal.SIGINT:  # ignored by the parent (a job started with & from a script): said
                    self.say("Note: SIGINT is ignored in this process (its parent set it so, as a shell script does "
                             "for a job it starts with &): Ctrl-C and kill -INT do not stop it; SIGTERM does")
                continue  # stays ignored
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not in the main thread
                pass
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        return False


def _with_divergence(meta, diverged):
    """Checkpoint metadata `meta` recording `diverged` (runtime/metrics.TrainStats.diverged), or none when None."""
    meta = {key: value for key, value in meta.items() if key != "diverged"}
    return dict(meta, diverged=diverged) if diverged else meta


class Runner:
    """The loop of every mode. `platform` and `precision` come from start-up (runtime/startup.set_up)."""

    def __init__(self, config, logger, distribution, platform=Platform(), precision=Precision(), lineage=None,
                 checkpoint=None):
        self.config = config
        self.lineage = lineage or {}  # runtime/settings.lineage: the ids its checkpoints record
        # The CheckpointInfo the settings were resolved from (runtime/settings.RunSettings.checkpoint): the one an
        # inference mode restores, which its PARAMETER record names, even if a training has saved a newer one since.
        self.resolved_checkpoint = checkpoint
        self.logger = logger
        self.distribution = distribution
        self.strategy = distribution.strategy
        self.platform = platform
        self.precision = precision
        self.exported_path = None
        self.global_batch_size = train_state.global_batch_size(config, distribution)
        self.state = None  # the TrainState, once train() has built it
        self._inference = None

    def inference_model(self):
        """(model, global step) for evaluation, predict and export: the model built with the inference kernels
        (plain convolutions on CPU), once per Runner; the weights come from the checkpoint each mode restores.
        Built outside the strategy's scope: the model runs on this worker alone (rank 0 evaluates and exports while
        the others wait), and variables created in a MultiWorkerMirroredStrategy's scope broadcast their initial
        values in a collective that the waiting workers would never join."""
        if self._inference is None:
            self._inference = (startup.build_model(self.config, self.platform, self.precision, purpose="inference"),
                               train_state.create_step_counter())
            if self.precision.policy and self.config.mode not in settings.TRAINING_MODES:  # (training said it)
                self.logger.print("Mixed precision: {}: the model computes in {} from float32 weights, so its outputs "
                                  "differ from a float32 run's by that rounding".format(
                                      self.precision.policy, self.precision.policy.split("_")[1]))
        return self._inference

    def restore_for_inference(self, required, ema=False, note_raw=True, note_unsettled=True):
        """The checkpoint the settings were resolved from in an inference mode, else (train_and_evaluate's evaluation
        of its own last step) model_dir's newest, its EMA weights with `ema`, into the inference model
        (runtime/checkpoints.py); its CheckpointInfo, or None."""
        model, global_step = self.inference_model()
        config = self.config
        resolved = self.resolved_checkpoint if config.mode in settings.INFERENCE_MODES else None
        return checkpoints.restore_for_inference(model, global_step, config.model_dir, resolved=resolved,
                                                 required=required, ema=ema,
                                                 note_raw=note_raw, note_unsettled=note_unsettled,
                                                 arch=config.arch, num_classes=config.num_classes,
                                                 use_final_conv=config.use_final_conv, log=self.logger.print)

    # ------------------------------------------------------------------ training
    def train(self, is_benchmark=False):
        """Trains --num_iter / --run_iter steps from model_dir's checkpoint (or a fine-tune source, or the initial
        values); returns the TrainState (also `self.state`)."""
        config = self.config
        log = self.logger
        distribution = self.distribution
        if not is_benchmark:
            runner_utils.require_data_dir(config.data_dir, "train")
        length = inputs.training_length(config, self.global_batch_size, log.print)
        state = self.state = train_state.create_train_state(config, self.platform, self.precision, distribution,
                                                            length)
        global_step = state.global_step

        saver = None
        if not is_benchmark:
            finetuned = checkpoints.restore_or_initialise(
                state.model, state.optimizer, global_step, config.model_dir,
                finetune_checkpoint=config.finetune_checkpoint, averages=state.averages, arch=config.arch,
                num_classes=config.num_classes, use_final_conv=config.use_final_conv, image_size=config.image_size,
                log=log.print)
            if finetuned:
                log.log(step="PARAMETER", data={"Restoring variables from checkpoint": finetuned})
                self._note_finetuned_classes(finetuned)
        distribution.broadcast_variables(state.variables)
        current_step = int(global_step.numpy())
        if not is_benchmark:
            saver = checkpoint.CheckpointWriter(config.model_dir, state.checkpoint_entries,
                                                self._metadata_seen_from(current_step), max_to_keep=5,
                                                keep_every_hours=3)
        run_iter = runner_utils.steps_this_run(config.run_iter, config.iter_unit, length.steps_per_epoch,
                                               length.num_steps, current_step)
        distribution.check_same_step(current_step)
        if distribution.is_chief:
            self._log_training_parameters(length, is_benchmark, trains=run_iter > 0)
            # once per run: every other worker has just been checked to resume at this step too
            print("Current step: {}".format(current_step), flush=True)
        left = length.num_steps - current_step
        if 0 < run_iter < left:
            unit = config.iter_unit if config.run_iter == 1 else config.iter_unit + \
                ("es" if config.iter_unit == "batch" else "s")
            log.print("Running {} of the {} steps left (--run_iter {} {})".format(run_iter, left, config.run_iter,
                                                                                 unit))
        if run_iter == 0:
            log.print("Model already trained required number of steps. Skipped")
            return state
        if distribution.is_chief:
            self._note_quant_delay_not_reached(run_iter)
        # With --seed the stream restarts where the restored step left it (exact resume, docs/RELIABILITY.md).
        dataset = inputs.train_dataset(config, self.platform, distribution.rank, distribution.size,
                                       start_step=current_step if config.seed is not None else 0, log=log.print)
        dataset = inputs.prefetch_to_accelerator(distribution.distribute_dataset(dataset), self.platform,
                                                 config.uses_dali)
        started = None  # the checkpoint a new run writes at its start, before its first step
        writer = None
        if saver is not None and distribution.is_chief:  # (main.py removed a killed save's debris at its start)
            if saver.latest_checkpoint is None:
                started = saver.save(current_step)
            else:
                self._note_other_labels_file()
            try:
                if started is not None:
                    self._copy_labels_file()
                writer = self._summary_writer()
            except Exception:  # (a full disk) before the first step, as in the loop below
                if started is not None:
                    self._discard_start(saver, started)
                raise
        meter = ThroughputMeter(self.global_batch_size, config.warmup_steps)
        stats = TrainStats(self.precision.dynamic, config.max_skipped_steps,
                           "float16 gradients overflowed at the static loss scale: lower --static_loss_scale, or "
                           "leave it out for dynamic scaling" if self.precision.loss_scaling == "static"
                           and self.precision.policy == "mixed_float16" else "lower --lr_init or check the data",
                           num_classes=config.num_classes,
                           diverged=saver.meta.get("diverged") if saver is not None else None)
        iterator = iter(dataset)
        progress = _progress(run_iter, "train", config.no_progress or not distribution.is_chief)
        stopped_by_signal = False
        stepped = False
        with StopRequest(BENCHMARK_KEEPS if is_benchmark else CHECKPOINT_KEPT,
                         agree_every=SIGNAL_SYNC_EVERY if distribution.size > 1 else None,
                         say=self.logger.print) as stop:
            try:
                for index in range(run_iter):
                    start = time.perf_counter()
                    images, labels = inputs.next_training_batch(iterator, config, current_step + index)
                    values = {key: value.numpy() for key, value in state.train_step(images, labels).items()}
                    stepped = True
                    meter.add(time.perf_counter() - start)
                    step = int(global_step.numpy())
                    health = stats.check(values, step)
                    if distribution.is_chief:
                        if health:
                            log.print(health)
                        if saver is not None and saver.meta.get("diverged") != stats.diverged:
                            saver.meta = _with_divergence(saver.meta, stats.diverged)  # the checkpoints say so
                        self._log_train_step(values, step, index, meter, length.steps_per_epoch, is_benchmark)
                        if writer is not None and step % SUMMARY_EVERY_STEPS == 0:
                            with writer.as_default(step=step):
                                for key in ("cross_entropy", "l2_loss", "total_loss", "learning_rate", "loss_scale"):
                                    tf.summary.scalar(key, float(values[key]))
                                tf.summary.scalar("train_imgs_per_sec", meter.last_ips)
                        if saver is not None and step % config.checkpoint_interval == 0:
                            self._save_checked(saver, stats, step)
                    if progress is not None:
                        progress.update(1)
                    if distribution.any_worker_flag(stop.requested):
                        stopped_by_signal = True
                        break
            except Exception as error:
                if isinstance(error, LogWriteError) and stepped and saver is not None:
                    raise self._checkpointed_after_log_failure(error, saver, int(global_step.numpy())) from None
                if started is not None and (not stepped or getattr(error, "from_input", False)
                                            and saver.latest_checkpoint == started):
                    self._discard_start(saver, started, int(global_step.numpy()) - current_step)
                raise  # (main.py turns a collective's failure after another worker's loss into one line)
            finally:
                # An exception leaves this frame in its traceback, and a traceback caught by a context manager can
                # sit in a reference cycle until the process ends: the input's threads would then still run while
                # the process tears down. Dropped here, they stop now.
                del iterator
            if progress is not None:
                progress.close()

            final_step = int(global_step.numpy())
            if saver is not None and distribution.is_chief and \
                    not (saver.latest_checkpoint or "").endswith("-{}".format(final_step)):
                # Still under the StopRequest: a first signal here (a preemption's SIGTERM) lets this save finish and
                # then stops the run; a second ends it at once, naming the checkpoint a resume takes.
                stop.when = "once the checkpoint of step {} is written".format(final_step)
                stop.kept = lambda: self._kept_after_interrupted_save(final_step)
                self._save_checked(saver, stats, final_step)
            # A signal after the workers' last agreement (during the final save) stops every worker here.
            if not stopped_by_signal and distribution.all_workers_flag(stop.requested):
                stopped_by_signal = True
        if writer is not None:
            writer.flush()
        if distribution.is_chief:
            if meter.warmup_warning():  # any run this short: its throughput counts tracing and warm-up
                log.print(meter.warmup_warning())
            log.log(step=(), data=meter.summary("train"))
            if stats.skipped_total:
                log.log(step=(), data={"skipped_steps": stats.skipped_total})
                if stats.skipped_total == len(meter.times):  # (fewer than --max_skipped_steps, so not stopped)
                    log.print("WARNING: all {} steps were skipped (non-finite float16 gradients under loss scaling): "
                              "no update was applied, and the throughput above times steps that changed nothing"
                              .format(stats.skipped_total))
        log.print("Ending Model Training ...")
        if stopped_by_signal:
            raise TrainingInterrupted(final_step, stop.signum, checkpointed=saver is not None)
        return state

    def _note_quant_delay_not_reached(self, run_iter):
        """The note of a QAT run that ends before --quant_delay's steps have passed: it trains the float model
        throughout. The delay counts the model's QAT training steps (its `quant_step`, checkpointed), from where
        QAT started, not the global step."""
        delay = self.config.quant_delay if self.config.quantize else 0
        counters = [variable for variable in self.state.model.variables if variable.path.endswith("quant_step")]
        if not delay or not counters:
            return
        done = int(counters[0].numpy())
        if done + run_iter <= delay:
            self.logger.print("Note: --quant_delay {} is not reached in this run: quantisation starts after {} QAT "
                              "steps and this run ends after {}, so it trains the float model throughout (the "
                              "activation ranges are still tracked)".format(delay, delay, done + run_iter))

    def _save_checked(self, saver, stats, step):
        """Saves the checkpoint of `step`, recording in it a blow-up of the weights that step's update made: the
        step's own check (TrainStats.check) saw the L2 term of the weights before the update."""
        weights_l2 = losses.l2_loss(resnet.regularized_variables(self.state.model), self.config.weight_decay)
        health = stats.check_weights(float(weights_l2), step)
        if health:
            self.logger.print(health)
        if saver.meta.get("diverged") != stats.diverged:
            saver.meta = _with_divergence(saver.meta, stats.diverged)
        saver.save(step)

    @staticmethod
    def _checkpointed_after_log_failure(error, saver, step):
        """The UserError ending a training whose log could not be written (a full --results_dir disk), after its
        steps since the last checkpoint are saved, where model_dir has room for them."""
        try:
            if not (saver.latest_checkpoint or "").endswith("-{}".format(step)):
                saver.save(step)
        except UserError as save_error:
            return UserError("{}; the training stopped at step {}, and its checkpoint could not be written either: "
                             "{}".format(error, step, save_error))
        # stdout's own error already says what to do about it (a closed pipe, a full disk behind a redirection)
        room = "" if isinstance(error, StdoutWriteError) else "give the log room and "
        return UserError("{}; the training stopped at step {}, checkpointed: {}run the same command again to "
                         "resume".format(error, step, room))

    def _kept_after_interrupted_save(self, step):
        """The interrupt line's account of a final save a signal cut short: the checkpoint the state file names,
        which a resume takes (read from disk: the signal may have come before or after the state file's update)."""
        latest = checkpoint.latest_checkpoint(self.config.model_dir, warn=lambda *_: None)
        if latest is None:
            return "no checkpoint was written: run the same command again to start afresh"
        return "the last complete checkpoint, {}, is kept{}: run the same command again to resume from it".format(
            latest, "" if latest.endswith("-{}".format(step)) else " (the save of step {} was cut short)".format(step))

    def _metadata_seen_from(self, step):
        """The metadata of this run's checkpoints: with the training's and this session's ids (`lineage`), the
        images its training had seen at `step`, where it starts
        (runtime/settings.images_seen_record: from the checkpoint it resumes, 0 for a new run or a fine-tune), so
        that a later resume at another images per step can count them, and the divergence the resumed checkpoint
        records."""
        # (the restore said which checkpoint it took, and any it skipped: not said twice)
        latest = checkpoint.latest_checkpoint(self.config.model_dir, warn=lambda *_: None)
        info = checkpoint.inspect(latest) if latest else None
        seen = settings.images_seen_record(info, step)
        meta = self.state.checkpoint_metadata
        if self.lineage:
            meta = dict(meta, lineage={"id": self.lineage["id"], "session": self.lineage["session"]})
        if info is not None and info.diverged:  # a resume of a diverged training stays one
            meta = dict(meta, diverged=info.diverged)
        if seen is None or "training" not in meta:
            return meta
        return dict(meta, training=dict(meta["training"], images_seen=seen))

    def _log_training_parameters(self, length, is_benchmark=False, trains=True):
        """The original's parameter lines of the run's length and schedule, then, when it has steps to train
        (`trains`; a run that has none says "Model already trained required number of steps. Skipped"), the lines on
        the training they will be: the warmup's reach, the precision and this CPU's bfloat16, mixup, the extensions
        and QAT."""
        config = self.config
        log = self.logger
        log.print("Starting Model Training...")
        log.print("Training Epochs", length.num_epochs)
        log.print("Total Steps", length.num_steps)
        log.print("Steps per Epoch", length.steps_per_epoch)
        log.print("Decay Steps", length.num_decay_steps)
        log.print("Weight Decay Factor", config.weight_decay)
        log.print("Init Learning Rate", config.lr_init)
        log.print("Momentum", config.momentum)
        # The original's count of replicas (Horovod's size), kept for the tools that read it; said to be no GPUs
        # when the replicas are on the CPU.
        log.print("Num GPUs", self.distribution.num_replicas,
                  *(() if self.platform.gpu else ("(replicas on the CPU: no GPU is used)",)))
        log.print("Per-GPU Batch Size", config.batch_size)
        if self.global_batch_size != config.batch_size:
            log.print("Global Batch Size {} ({}{})".format(
                self.global_batch_size, self.distribution.describe(),
                ", {} micro-batches each".format(config.grad_accum_steps) if config.grad_accum_steps > 1 else ""))
        log.print("Using {} learning rate schedule".format("cosine" if config.cosine_lr else "step"))
        if not trains:
            return
        if self.global_batch_size != learning_rate.REFERENCE_BATCH and not is_benchmark:
            # "Init Learning Rate" is the flag, as the original printed it; the steps log the scaled rate
            log.print("Note: --lr_init {:g} is the rate of a batch of {}: this run's global batch of {} peaks at "
                      "{:.4g} (the original's linear scaling)".format(
                          config.lr_init, learning_rate.REFERENCE_BATCH, self.global_batch_size,
                          learning_rate.base_learning_rate(config.lr_init, self.global_batch_size)))
        epoch_note = None if is_benchmark else runner_utils.batch_unit_epoch_note(
            config.iter_unit, length.num_samples, length.num_steps, length.num_epochs, self.global_batch_size)
        if epoch_note:
            log.print(epoch_note)
        reach = learning_rate.warmup_reach(length.steps_per_epoch, config.lr_warmup_epochs, length.num_steps)
        if reach is not None and not is_benchmark:  # (a benchmark's synthetic epoch is the whole run)
            def steps(n):
                return "{:,} step{}".format(n, "" if n == 1 else "s")
            log.print("Note: the learning-rate warmup (--lr_warmup_epochs {} = {}) lasts the whole run of {}: the "
                      "rate rises to {} of its peak and never decays; a smaller --lr_warmup_epochs reaches the "
                      "peak".format(config.lr_warmup_epochs, steps(reach[0]), steps(length.num_steps),
                                    learning_rate.percent_of_peak(reach[1])))
        few_values = None if is_benchmark else few_batch_norm_values_warning(
            config.batch_size, resnet.last_map_side(config.input_size), config.input_size)
        if few_values:
            log.print(few_values)
        if self.precision.policy:
            note = " (TensorFlow's float16 CPU kernels: for checking the GPU path)" \
                if self.precision.policy == "mixed_float16" and not self.platform.gpu else ""
            log.print("Mixed precision: {}{}".format(self.precision.describe(), note))
        if not self.platform.gpu:
            bfloat16_note = cpu_bfloat16_note(self.precision.policy, cpu_bfloat16_support())
            if bfloat16_note:
                log.print(bfloat16_note)
        if config.mixup > 0:
            log.print("Using mixup training with beta=", config.mixup)
        self._log_extensions()
        if config.quantize:  # the original's two QAT log lines (docs/ORIGINAL.md#quantisation-aware-training)
            log.log(step="PARAMETER", data={"MODE": "USING SYMMETRIC MODE" if config.symmetric
                                            else "USING ASSYMETRIC MODE"})
            log.log(step="PARAMETER", data={"QUANTIZATION AWARE TRAINING ENABLED": True})

    def _log_extensions(self):
        """One line per training extension in use (docs/EXTENSIONS.md); none with the defaults."""
        config = self.config
        log = self.logger.print
        if config.grad_accum_steps > 1:
            log("Gradient accumulation: {} micro-batches of {} per step and GPU; effective batch {}".format(
                config.grad_accum_steps, config.batch_size, self.global_batch_size))
        if config.moving_average_decay > 0:
            log("EMA of the weights and BN statistics, decay min({:g}, (1 + step) / (10 + step))".format(
                config.moving_average_decay))
        if config.cutmix > 0:
            both = " ({:g} of the images; the others mixup)".format(config.mixup_switch_prob) if config.mixup > 0 \
                else ""
            log("Using CutMix with alpha={:g}{}".format(config.cutmix, both))
        augmenter = None if config.uses_synthetic_data else config.augmenter_name  # (synthetic: not augmented)
        if augmenter == "autoaugment":
            log("Augmentation: AutoAugment, ImageNet policy")
        elif augmenter == "randaugment":
            log("Augmentation: RandAugment, {} layers at magnitude {:g}".format(config.raug_num_layers,
                                                                                 config.raug_magnitude))

    def _note_other_labels_file(self):
        """A resume on a dataset whose labels.txt names other classes than the one kept beside the checkpoints (which
        predict reads): said, since the class names predict prints may no longer be the data's."""
        if self.config.data_dir is None:
            return
        other = runner_utils.other_class_names(os.path.join(self.config.data_dir, "labels.txt"),
                                               os.path.join(self.config.model_dir, "labels.txt"))
        if other:
            self.logger.print("Note: {}, copied there when this training started; predict reads that one: replace it "
                              "if this data's class names are the ones to show".format(other))

    def _note_finetuned_classes(self, finetuned):
        """A fine-tune that keeps the checkpoint's classifier (same class count) onto data whose labels.txt names
        other classes than the one beside the checkpoint: said, since output k starts as the checkpoint's class k."""
        config = self.config
        if config.data_dir is None or checkpoint.inspect(finetuned).num_classes != config.num_classes:
            return
        other = runner_utils.other_class_names(os.path.join(config.data_dir, "labels.txt"),
                                               os.path.join(os.path.dirname(finetuned), "labels.txt"))
        if other:
            self.logger.print("Note: {}, beside --finetune_checkpoint: its classifier is kept (the same {} classes), "
                              "so output k starts as that checkpoint's class k and is trained to this data's "
                              "label k".format(other, config.num_classes))

    def _note_evaluated_classes(self):
        """evaluate on data whose labels.txt names other classes than the one beside the checkpoints: a WARNING,
        since the accuracy compares output k with label k."""
        config = self.config
        if config.data_dir is None or config.mode == "train_and_evaluate":
            return  # (a training run said it at its start)
        other = runner_utils.other_class_names(os.path.join(config.data_dir, "labels.txt"),
                                               os.path.join(config.model_dir, "labels.txt"))
        if other:
            self.logger.print("WARNING: {}, the classes this checkpoint was trained on: {}".format(
                other, runner_utils.OTHER_CLASSES_SCORED))

    def _discard_start(self, saver, started, steps=0):
        """A new run that failed before its first step (a label the classifier cannot hold, unreadable data, a full
        disk) trained nothing, and one whose input failed (`steps` > 0: DALI checks a batch's labels as it
        delivers it) before its first checkpoint after the start kept nothing of its steps: its start checkpoint
        would only bind the corrected command to the failed one's settings, so it is removed."""
        saver.discard_only(started)
        when = "before its first step" if not steps else "on its input before its first checkpoint after the start " \
            "(the {} step{} it trained {} lost either way)".format(steps, *(("", "is") if steps == 1 else ("s", "are")))
        self.logger.print("Removed {}: this run stopped {}, so the next starts afresh".format(started, when))

    def _copy_labels_file(self):
        """Keeps the dataset's class names beside the checkpoints, so `predict` can name classes. Copied under a
        temporary name and renamed, so a full disk leaves no empty labels.txt; an empty one (a copy cut short)
        names no class and is replaced."""
        if self.config.data_dir is None:
            return
        source = os.path.join(self.config.data_dir, "labels.txt")
        target = os.path.join(self.config.model_dir, "labels.txt")
        if os.path.isfile(source) and runner_utils.read_class_names(target) is None:
            with open(source, "rb") as names, replaced_file(target, "wb") as copy:
                shutil.copyfileobj(names, copy)

    def _log_train_step(self, values, step, index, meter, steps_per_epoch, is_benchmark):
        config = self.config
        if is_benchmark:
            if index >= config.warmup_steps and (index - config.warmup_steps + 1) % config.display_every == 0:
                self.logger.log(step=(0, index + 1), data={"total_ips": meter.last_ips})
            return
        epoch = int((step - 1) // steps_per_epoch)
        losses = {key: float(values[key]) for key in ("cross_entropy", "l2_loss", "total_loss", "learning_rate")}
        if self.precision.loss_scaling:  # the scale this step ran with (an addition, under loss scaling only)
            losses["loss_scale"] = float(values["loss_scale"])
        # Every --display_every steps counted from the training's first step, not this invocation's (the original's
        # hook counted its own): a resumed run logs the steps an uninterrupted one does.
        if (step - 1) % config.display_every == 0:
            self.logger.log(step=(epoch, step), data={"imgs_per_sec": meter.last_ips, **losses})
        if int(step // steps_per_epoch) > int((step - 1) // steps_per_epoch):
            # global_step (an addition): the step that ended the epoch, which the step records every --display_every
            # steps only bound (utils/plot_log draws the epoch's boundary there).
            self.logger.log(step=(epoch,), data={**losses, "global_step": step})

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, iter_unit, num_iter, batch_size, is_benchmark=False, export_dir=None):
        config = self.config
        log = self.logger
        if is_benchmark and config.data_dir is None:
            num_steps, num_epochs, num_decay_steps = num_iter, 1, num_iter
        else:
            filenames = runner_utils.list_filenames_in_dataset(config.data_dir, "validation")
            num_samples = runner_utils.count_samples(filenames, "Validation", log.print)
            num_steps, num_epochs, num_decay_steps = runner_utils.count_steps(
                iter_unit, num_samples, num_iter, batch_size)
        # An evaluation of whole epochs reads each record once per epoch, so its count is of distinct images;
        # benchmarks and --iter_unit batch may loop over the data.
        passes = num_epochs if iter_unit == "epoch" and not is_benchmark and config.data_dir is not None else None
        skipped = inputs.SkippedRecords()
        dataset = inputs.eval_dataset(config, self.platform, batch_size, log=log.print, num_epochs=passes,
                                      skipped=skipped)
        # An evaluation reports the raw and the EMA weights' accuracy; a benchmark runs the ones asked for.
        # A benchmark's outputs are not read, unless it exports them.
        info = self.restore_for_inference(required=not is_benchmark, ema=is_benchmark and config.use_ema_weights,
                                          note_raw=is_benchmark, note_unsettled=not is_benchmark or bool(export_dir))
        if config.use_ema_weights and info is not None:
            checkpoints.require_averages(info)  # (settings refused it before the log; a Python caller here)
            if config.mode == "evaluate" and not export_dir:  # (train_and_evaluate's said at its start)
                log.print("Note: --use_ema_weights picks nothing here: this evaluation reports both the raw and the "
                          "EMA weights' accuracy (the flag picks the weights an --export_dir export takes)")
        if info is not None:
            self._note_evaluated_classes()

        log.print("Starting Model Evaluation...")
        log.print("Evaluation Epochs", num_epochs)
        log.print("Evaluation Steps", num_steps)
        log.print("Decay Steps", num_decay_steps)
        log.print("Global Batch Size", batch_size)
        replicas = self.distribution.num_replicas
        if replicas > 1:  # (training's global batch spans the replicas; this one does not)
            log.print("Note: rank 0 evaluates alone, on one device, so this batch is --batch_size's, as the "
                      "original's; {}".format("the other replica waits" if replicas == 2 else
                                              "the other {} replicas wait".format(replicas - 1)))

        model, global_step = self.inference_model()
        eval_step = train_step.make_eval_step(model, config.num_classes, jit_compile=config.xla)
        meter = ThroughputMeter(batch_size, config.warmup_steps)
        top1, top5, seen, non_finite, stopped = self._evaluation_pass(eval_step, iter(dataset), num_steps, meter,
                                                                      is_benchmark)
        if passes is not None:
            require_evaluated(seen, num_samples, batch_size, skipped.count)
        if config.data_dir is not None:
            log.print(evaluated_images_line(seen, num_samples, num_epochs, iter_unit, batch_size,
                                            skipped=skipped.count if passes is not None else 0,
                                            read=skipped.read if passes is not None else None))
            if config.uses_dali and passes == 1 and stopped is None:
                note = dali_drops_other_images_note(num_samples - skipped.count - seen, num_samples, len(filenames),
                                                    data_utils.INTERLEAVE_BLOCK)
                if note:
                    log.print(note)
        if meter.warmup_warning():  # any evaluation this short: its throughput and latency count the warm-up
            log.print(meter.warmup_warning())
        if non_finite:
            log.print(non_finite_warning(non_finite, seen))
        results = {"top1_accuracy": top1 / max(seen, 1), "top5_accuracy": top5 / max(seen, 1)}
        if config.data_dir is None:  # synthetic labels are random: an accuracy of them would mean nothing
            results = {}
            log.print("Synthetic data: no accuracy is reported (its labels are random)")
        elif (note := top5_of_few_outputs_note(config.num_classes)) is not None:
            log.print(note)
        if not is_benchmark and info is not None and info.has_weight_averages:
            results.update(self._evaluate_averages(info, eval_step, dataset, num_steps, export_dir))
        results.update(meter.summary("eval"))
        results.update(meter.latencies())
        log.log(step=(), data=results)
        if not is_benchmark and self.distribution.is_chief:
            self._write_eval_summaries(results, int(global_step.numpy()))
        log.print("Model evaluation finished")
        if stopped is not None:  # a benchmark stopped by a signal: its figures are logged, nothing is exported
            raise TrainingInterrupted(len(meter.times), stopped, checkpointed=False, kind="inference benchmark",
                                      detail="nothing exported to --export_dir" if export_dir else
                                      "its figures above cover the steps it ran")
        if export_dir:
            class_names = runner_utils.class_names_for_export(config.model_dir, config.num_classes)
            # (evaluation and its export run the float model of a QAT checkpoint, as the original: the record says so)
            unused_ranges = {"unused_quantization_ranges": True} \
                if info is not None and info.has_quantization_ranges else {}
            source = export.source_record(config.arch, config.num_classes, info, config.use_ema_weights, class_names,
                                          **unused_ranges)
            self.exported_path = export.save_saved_model(model, config.input_size, export_dir, source)
            log.log(step=(), data={"export_dir": self.exported_path})
            log.print("Exported the SavedModel to {} (signatures serving_default and predict)".format(
                os.path.abspath(self.exported_path)))
            if class_names:
                log.print("It records the class names of {} (output k is line k + 1){} in assets.extra/source.json"
                          .format(os.path.join(config.model_dir, "labels.txt"),
                                  runner_utils.unnamed_outputs(class_names, config.num_classes)))
            else:
                log.print(runner_utils.no_class_names_line(config.model_dir, config.num_classes))
            if info is None:  # a benchmark without a checkpoint: said, so the export is not taken for a model
                log.print("Note: SavedModel {} holds freshly initialised weights: model_dir {} has no "
                          "checkpoint".format(self.exported_path, config.model_dir))
        return results

    def _summary_writer(self):
        """The TensorBoard writer of the training scalars in model_dir; one line when it cannot be created."""
        try:
            return tf.summary.create_file_writer(self.config.model_dir)
        except tf.errors.OpError as error:
            raise UserError("cannot write TensorBoard's events in --model_dir {} ({})".format(
                self.config.model_dir, first_line(error))) from None

    def _write_eval_summaries(self, results, step):
        """TensorBoard beside the training scalars (the Estimator's model_dir/eval), at the evaluated `step`. A
        model_dir that cannot take them (read-only: a checkpoint shared for evaluation; a full disk) is said, and the
        evaluation's result and export go on: the log has the figures."""
        directory = os.path.join(self.config.model_dir, "eval")
        try:
            writer = tf.summary.create_file_writer(directory)
            with writer.as_default(step=step):
                for key in ("top1_accuracy", "top5_accuracy", "ema_top1_accuracy", "ema_top5_accuracy",
                            "eval_throughput"):
                    if key in results:
                        tf.summary.scalar(key, results[key])
            writer.close()
        except (tf.errors.OpError, OSError) as error:
            self.logger.print("Note: the evaluation's TensorBoard scalars are not written: {} cannot be written "
                              "({})".format(directory, first_line(error)))

    def _evaluation_pass(self, eval_step, iterator, num_steps, meter, is_benchmark, log_steps=True):
        """(top-1 hits, top-5 hits, images, images with non-finite logits, None) over `num_steps` batches, or fewer
        when a finite input ends first (records skipped as corrupt). With `log_steps`, every --display_every step
        after --warmup_steps logs its `total_ips` at step (0, i), in evaluations as in benchmarks (the original's
        BenchmarkLoggingHook). A benchmark stops after the step a signal (SIGINT, SIGTERM, SIGUSR1, SIGHUP) arrived
        in and returns that signal last, so that its figures cover the steps it ran, as a training benchmark's do; an
        evaluation is interrupted at once (an accuracy of part of the validation split would mislead)."""
        config = self.config
        top1 = top5 = seen = non_finite = 0
        progress = _progress(num_steps, "eval", config.no_progress)
        stop = StopRequest(BENCHMARK_KEEPS) if is_benchmark else None
        try:
            with stop if stop is not None else contextlib.nullcontext():
                for index in range(num_steps):
                    start = time.perf_counter()
                    try:
                        images, labels = inputs.next_batch(iterator)
                    except StopIteration:
                        break
                    hits1, hits5, _, bad = eval_step(images, labels)
                    hits1, hits5 = int(hits1.numpy()), int(hits5.numpy())
                    non_finite += int(bad.numpy())
                    meter.add(time.perf_counter() - start)
                    top1 += hits1
                    top5 += hits5
                    seen += int(labels.shape[0])
                    if log_steps and index >= config.warmup_steps and \
                            (index - config.warmup_steps + 1) % config.display_every == 0:
                        self.logger.log(step=(0, index + 1), data={"total_ips": meter.last_ips})
                    if progress is not None:
                        progress.update(1)
                    if stop is not None and stop.requested:
                        break
        finally:
            del iterator  # as in train(): its threads stop now, not at the process's end
        if progress is not None:
            progress.close()
        return top1, top5, seen, non_finite, stop.signum if stop is not None and stop.requested else None

    def _evaluate_averages(self, info, eval_step, dataset, num_steps, export_dir):
        """The same images through the checkpoint's EMA weights: {ema_top1_accuracy, ema_top5_accuracy}. The model
        keeps the EMA weights afterwards when --use_ema_weights asks to export them, else gets its raw ones back."""
        model, _ = self.inference_model()
        raw = [tf.identity(v) for v in model.variables]
        count = checkpoint.load_averages(model, info, self.config.arch,
                                         checkpoint.describe_model(self.config.arch, self.config.num_classes))
        self.logger.print("Evaluating the EMA weights of {} too ({} averaged variables)".format(info.path, count))
        top1, top5, seen, _, _ = self._evaluation_pass(eval_step, iter(dataset), num_steps,
                                                       ThroughputMeter(1, 0), is_benchmark=False, log_steps=False)
        if export_dir and self.config.use_ema_weights:
            self.logger.print("Exporting the EMA weights (--use_ema_weights)")
        else:
            for variable, value in zip(model.variables, raw):
                variable.assign(value)
            if export_dir:
                self.logger.print("Exporting the raw weights (--use_ema_weights would export the EMA ones)")
        return {"ema_top1_accuracy": top1 / max(seen, 1), "ema_top5_accuracy": top5 / max(seen, 1)}

    # ------------------------------------------------------------------ predict
    def predict(self, to_predict, labels_file=None):
        """Top-5 classes of every image of `to_predict` (a file, or a directory's image files in sorted order) in
        batches of --batch_size (runtime/predict.py); returns its PredictCounts. A single file that cannot be used
        is a UserError before the checkpoint is read."""
        config = self.config
        files = runner_utils.parse_inference_input(to_predict)
        if os.path.isfile(to_predict):
            predict.check_image(files[0], config.image_size)
        self.restore_for_inference(required=True, ema=config.use_ema_weights)
        class_names = predict.load_class_names(labels_file, config, say=self.logger.print)
        model, _ = self.inference_model()
        predict_step = train_step.make_predict_step(model, config.image_size, jit_compile=config.xla)
        for metric, meta in predict.METADATA.items():
            self.logger.metadata(metric, meta)
        # (the counts end the log only: the run's last line says them on the terminal)
        return predict.predict_files(predict_step, files, config.image_size, config.batch_size, class_names,
                                     log=lambda data: self.logger.log(step=(), data=data, echo=False))


class TrainingInterrupted(Exception):
    """Training (or an inference benchmark, `kind`) stopped on a signal at `step`, after writing a checkpoint there
    unless it was a benchmark (`checkpointed` False). `signum`: the signal this process received (None when a peer
    worker's stop ended the loop)."""

    def __init__(self, step, signum=None, checkpointed=True, kind="training", detail=None):
        super().__init__("{} stopped by a signal at step {}; {}".format(
            kind, step, detail or ("checkpoint written" if checkpointed else "a benchmark writes no checkpoint")))
        self.step = step
        self.signum = signum
        self.checkpointed = checkpointed

    @property
    def outcome(self):
        """What the interrupt line says is kept."""
        if self.checkpointed:
            return "checkpoint written at step {}; run the same command again to resume".format(self.step)
        return "benchmark stopped at step {}; its throughput line covers the steps it ran".format(self.step)

    @property
    def by_user(self):
        """Ctrl-C: the run ends with the shell's status for SIGINT, so a calling script stops too (a SIGTERM or
        SIGUSR1, a scheduler's preemption, is not a failure: status 0)."""
        return self.signum == signal.SIGINT


def _progress(total, description, disabled):
    if not progress_enabled(disabled):
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc=description, leave=False)
