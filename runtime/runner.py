"""The Runner: train / evaluate / predict / benchmarks / SavedModel export (docs/ORIGINAL.md#modes).

A custom training loop replaces the original's Estimator: one `tf.function` train step (XLA-compiled under
`--xla`) does forward, loss (smoothed CE + coupled L2), backward, loss scaling and the TF1-momentum update, and
returns the numbers the logger needs. Host work per step is one fetch of a few scalars.
"""

import math
import os
import shutil
import signal
import sys
import time

import numpy as np
import tensorflow as tf
import keras

from model import checkpoint_io, resnet
from runtime import runner_utils
from utils import data_utils, learning_rate, losses, optimizers
from utils.errors import UserError
from utils.logger import progress_enabled

TRAIN_LOG_WARMUP_STEPS = 20
SUMMARY_EVERY_STEPS = 100


def _mean_or_none(values):
    return float(np.mean(values)) if values else None


class StopRequest:
    """SIGTERM / SIGINT / SIGUSR1: finish the current step, checkpoint, stop. A second signal exits at once."""

    def __init__(self):
        self.requested = False
        self._previous = {}

    def _handle(self, signum, frame):
        if self.requested:
            os._exit(128 + signum)
        self.requested = True
        print("Received signal {}: stopping after the current step (send it again to exit at once)".format(
            signal.Signals(signum).name), flush=True)

    def __enter__(self):
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not in the main thread
                pass
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        return False


class Runner:
    def __init__(self, config, logger, distribution):
        self.config = config
        self.logger = logger
        self.distribution = distribution
        self.strategy = distribution.strategy
        self.exported_path = None
        self.dtype_policy = precision_policy(config.amp)
        self.loss_scaling = loss_scaling_mode(config)
        self.global_batch_size = config.batch_size * distribution.num_replicas
        with self.strategy.scope():
            self.model = resnet.build_model(
                config.arch,
                num_classes=config.num_classes,
                compute_format=config.data_format,
                dtype_policy=self.dtype_policy,
                weight_init=config.weight_init,
                use_final_conv=config.use_final_conv,
                input_normalized=config.uses_dali,
                image_size=config.input_size,
                seed=config.seed,
                quantization=quantization_config(config),
            )
            # ONLY_FIRST_REPLICA: every replica steps it once per step; with several replicas one increment counts.
            self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                           aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self.regularized = resnet.regularized_variables(self.model)

    # ------------------------------------------------------------------ data
    def _train_dataset(self, is_benchmark, start_step=0):
        config = self.config
        size = config.input_size
        seed = None if config.seed is None else config.seed * 2 + self.distribution.rank
        if config.data_dir is None:
            if not is_benchmark:
                raise UserError("`data_dir` must be specified for training!")
            self.logger.print("Using Synthetic Data ...")
            return data_utils.get_synth_input_fn(config.batch_size, size, size, config.num_classes, seed=seed)
        filenames = runner_utils.list_filenames_in_dataset(config.data_dir, "train")
        data_utils.check_tfrecord_files(filenames)
        if config.uses_dali:
            from utils import dali_utils
            dali_utils.require_dali()
            self.logger.print("Using DALI input... ")
            return dali_utils.get_dali_input_fn(
                filenames, runner_utils.list_index_files(config.data_idx_dir, filenames), config.batch_size,
                size, size, training=True, deterministic=config.seed is not None, seed=seed,
                num_shards=self.distribution.size, shard_index=self.distribution.rank,
                min_crop_area=config.min_crop_area)
        return data_utils.get_tfrecords_input_fn(
            filenames, config.batch_size, size, size, training=True, deterministic=config.seed is not None,
            seed=seed, num_shards=self.distribution.size, shard_index=self.distribution.rank,
            num_classes=config.num_classes, start_step=start_step, min_crop_area=config.min_crop_area)

    def _eval_dataset(self, batch_size):
        config = self.config
        size = config.input_size
        if config.data_dir is None:
            self.logger.print("Using Synthetic Data ...")
            return data_utils.get_synth_input_fn(batch_size, size, size, config.num_classes, seed=config.seed)
        filenames = runner_utils.list_filenames_in_dataset(config.data_dir, "validation")
        data_utils.check_tfrecord_files(filenames)
        if config.uses_dali:
            from utils import dali_utils
            dali_utils.require_dali()
            self.logger.print("Using DALI input... ")
            return dali_utils.get_dali_input_fn(
                filenames, runner_utils.list_index_files(config.data_idx_dir, filenames), batch_size,
                size, size, training=False)
        return data_utils.get_tfrecords_input_fn(filenames, batch_size, size, size, training=False,
                                                 num_classes=config.num_classes)

    def _training_steps(self, is_benchmark):
        """(num_steps, num_epochs, num_decay_steps, steps_per_epoch) of docs/ORIGINAL.md#step-counting."""
        config = self.config
        if config.data_dir is None:
            num_steps = config.num_iter
            return num_steps, 1, num_steps, float(num_steps)
        filenames = runner_utils.list_filenames_in_dataset(config.data_dir, "train")
        num_samples = runner_utils.count_samples(filenames, "Training", self.logger.print)
        num_steps, num_epochs, num_decay_steps = runner_utils.count_steps(
            config.iter_unit, num_samples, config.num_iter, self.global_batch_size)
        return num_steps, num_epochs, num_decay_steps, num_steps / num_epochs

    # ------------------------------------------------------------------ checkpoints (model/checkpoint_io.py)
    def _describe_model(self):
        config = self.config
        return "this model (--arch {} --num_classes {}{})".format(
            config.arch, config.num_classes, " --use_final_conv" if config.use_final_conv else "")

    def _checkpoint_metadata(self):
        config = self.config
        return checkpoint_io.metadata(config.arch, config.num_classes, config.input_size, config.use_final_conv,
                                      config.uses_dali)

    def latest_checkpoint(self):
        return checkpoint_io.latest_checkpoint(self.config.model_dir, warn=self.logger.print)

    def restore_for_inference(self, required):
        """Loads the latest checkpoint of model_dir into the model (every variable, verified); returns its path,
        or None when there is none and `required` is false (fresh weights, said so)."""
        path = self.latest_checkpoint()
        if path is None:
            if required:
                raise UserError("no checkpoint in model_dir {} (train first, or point --model_dir at a "
                                "directory with model.ckpt-* files)".format(self.config.model_dir))
            self.logger.print("No checkpoint in {}: running with freshly initialised weights".format(
                self.config.model_dir))
            return None
        info = checkpoint_io.inspect(path)
        checkpoint_io.check_fits(info, self.config.arch, self.config.num_classes)
        report = checkpoint_io.restore_model(self.model, info, self.config.arch, self._describe_model())
        self.global_step.assign(info.step or 0)  # evaluation summaries land at the checkpoint's step
        self.logger.print(report.describe())
        return path

    def _finetune_from(self, path):
        """Initialises the trainable variables from `path` (the original's --finetune_checkpoint: BN moving
        statistics and the optimizer start fresh). A checkpoint with another class count gives everything but the
        classifier, which starts from its initialisation (transfer learning)."""
        config = self.config
        prefix = checkpoint_io.find_checkpoint(path, "--finetune_checkpoint", warn=self.logger.print)
        info = checkpoint_io.inspect(prefix)
        checkpoint_io.check_fits(info, config.arch, config.num_classes, allow_other_classes=True)
        new_classifier = info.num_classes is not None and info.num_classes != config.num_classes
        report = checkpoint_io.restore_model(self.model, info, config.arch, self._describe_model(),
                                             trainable_only=True, skip_classifier=new_classifier)
        if new_classifier:
            self.logger.print("Fine-tuning from {} to {} classes: the classifier is initialised fresh, every other "
                              "trainable variable comes from the checkpoint".format(info.num_classes,
                                                                                    config.num_classes))
        self.logger.print(report.describe())
        self.logger.log(step="PARAMETER", data={"Restoring variables from checkpoint": prefix})

    def _restore_or_initialise(self, optimizer):
        """Resume from model_dir's newest complete checkpoint, else --finetune_checkpoint, else fresh weights."""
        config = self.config
        latest = self.latest_checkpoint()
        if latest is None:
            if config.finetune_checkpoint:
                self._finetune_from(config.finetune_checkpoint)
            return
        if config.finetune_checkpoint:
            self.logger.print("WARNING: --finetune_checkpoint {} is ignored: model_dir {} already has checkpoint {}, "
                              "and training resumes from it (use a new --model_dir to fine-tune)".format(
                                  config.finetune_checkpoint, config.model_dir, latest))
        info = checkpoint_io.inspect(latest)
        checkpoint_io.check_fits(info, config.arch, config.num_classes)
        report = checkpoint_io.restore_training(self.model, optimizer, self.global_step, info, config.arch,
                                                self._describe_model())
        self.logger.print(report.describe() + " with the optimizer state")

    # ------------------------------------------------------------------ training
    def _make_train_step(self, optimizer, schedule, mixup_seed):
        config = self.config
        model = self.model
        trainable = model.trainable_variables
        regularized = self.regularized
        static_scale = config.static_loss_scale if self.loss_scaling == "static" else None
        dynamic = self.loss_scaling == "dynamic"

        def step_with_weights(images, labels, lam):
            lr = schedule()
            with tf.GradientTape() as tape:
                targets = losses.smoothed_one_hot(labels, config.num_classes, config.label_smoothing)
                if lam is not None:
                    images, targets = losses.mixup(images, targets, lam)
                logits = model(images, training=True)
                cross_entropy = losses.softmax_cross_entropy(targets, logits)
                l2 = losses.l2_loss(regularized, config.weight_decay)
                total = cross_entropy + l2
                if dynamic:
                    scaled = optimizer.scale_loss(total)
                elif static_scale:
                    scaled = total * static_scale
                else:
                    scaled = total
            grads = tape.gradient(scaled, trainable)
            if static_scale:
                grads = [g / static_scale for g in grads]
            grads = self.distribution.reduce_gradients(grads)  # average over workers (utils/distributed.py)
            scale_before = optimizers.current_loss_scale(optimizer, static_scale)
            optimizer.apply(grads, trainable)
            skipped = tf.less(optimizers.current_loss_scale(optimizer, static_scale), scale_before)
            self.global_step.assign_add(1)
            top1 = losses.top_k_hits(labels, logits, 1)
            return {"cross_entropy": cross_entropy, "l2_loss": l2, "total_loss": total, "learning_rate": lr,
                    "top1_hits": top1, "loss_scale": scale_before, "skipped": skipped}

        jit = config.xla and self.distribution.jit_in_step
        if config.xla and not jit:  # collectives in the step: let XLA cluster around them
            tf.config.optimizer.set_jit("autoclustering")
        # Under jit_compile the mixup weights are drawn outside the compiled part: their Gamma sampler
        # (StatelessRandomGammaV3) has no XLA kernel. Same op, same seed: the same numbers with or without XLA.
        # Without jit the step stays one function (a nested tf.function must not hold the gradient all-reduce).
        core = tf.function(step_with_weights, jit_compile=True, reduce_retracing=True) if jit else step_with_weights

        def replica_step(images, labels):
            lam = None
            if config.mixup > 0:
                lam = losses.sample_beta([tf.shape(images)[0]], config.mixup,
                                         seed=tf.stack([mixup_seed, self.global_step]))
            return core(images, labels, lam)

        compiled = tf.function(replica_step, reduce_retracing=True)

        @tf.function
        def train_step(images, labels):
            outputs = self.strategy.run(compiled, args=(images, labels))
            return {key: self.strategy.experimental_local_results(value)[0] for key, value in outputs.items()}

        return train_step

    def train(self, is_benchmark=False):
        config = self.config
        log = self.logger
        num_steps, num_epochs, num_decay_steps, steps_per_epoch = self._training_steps(is_benchmark)

        with self.strategy.scope():
            schedule = lambda: learning_rate.learning_rate_schedule(  # noqa: E731
                self.global_step, config.lr_init, self.global_batch_size, steps_per_epoch,
                config.lr_warmup_epochs, num_decay_steps, config.cosine_lr)
            optimizer = optimizers.build_optimizer(schedule, config.momentum,
                                                   "dynamic" if self.loss_scaling == "dynamic" else None)
            optimizer.build(self.model.trainable_variables)
            self.distribution.prepare_optimizer(optimizer)

        saver = None
        if not is_benchmark:
            saver = checkpoint_io.CheckpointWriter(
                config.model_dir, checkpoint_io.training_entries(self.model, optimizer, self.global_step, config.arch),
                self._checkpoint_metadata(), max_to_keep=5, keep_every_hours=3)
            self._restore_or_initialise(optimizer)
        self.distribution.broadcast_variables(self.model.variables + optimizer.variables + [self.global_step])
        current_step = int(self.global_step.numpy())

        run_iter = config.run_iter
        if run_iter == -1:
            run_iter = num_steps
        elif config.iter_unit == "epoch":
            run_iter = int(run_iter * steps_per_epoch)
        run_iter = max(0, min(run_iter, num_steps - current_step))

        if self.distribution.is_chief:
            log.print("Starting Model Training...")
            log.print("Training Epochs", num_epochs)
            log.print("Total Steps", num_steps)
            log.print("Steps per Epoch", steps_per_epoch)
            log.print("Decay Steps", num_decay_steps)
            log.print("Weight Decay Factor", config.weight_decay)
            log.print("Init Learning Rate", config.lr_init)
            log.print("Momentum", config.momentum)
            log.print("Num GPUs", self.distribution.num_replicas)
            log.print("Per-GPU Batch Size", config.batch_size)
            log.print("Using {} learning rate schedule".format("cosine" if config.cosine_lr else "step"))
            if config.mixup > 0:
                log.print("Using mixup training with beta=", config.mixup)
            if config.quantize:  # the original's two QAT log lines (docs/ORIGINAL.md#quantisation-aware-training)
                log.log(step="PARAMETER", data={"MODE": "USING SYMMETRIC MODE" if config.symmetric
                                                else "USING ASSYMETRIC MODE"})
                log.log(step="PARAMETER", data={"QUANTIZATION AWARE TRAINING ENABLED": True})
        print("Current step: {}".format(current_step), flush=True)
        if run_iter == 0:
            log.print("Model already trained required number of steps. Skipped")
            return
        # With --seed the stream restarts where the restored step left it (exact resume, docs/RELIABILITY.md).
        dataset = self._train_dataset(is_benchmark, start_step=current_step if config.seed is not None else 0)
        dataset = self.distribution.distribute_dataset(dataset)
        dataset = prefetch_to_accelerator(dataset, config.uses_dali)
        if saver is not None and self.distribution.is_chief:
            checkpoint_io.remove_save_debris(config.model_dir)
            if saver.latest_checkpoint is None:
                saver.save(current_step)
                self._copy_labels_file()
        mixup_seed = tf.constant(config.seed if config.seed is not None else np.random.randint(2 ** 31 - 1),
                                 tf.int64)
        train_step = self._make_train_step(optimizer, schedule, mixup_seed)
        writer = None
        if self.distribution.is_chief and not is_benchmark:
            writer = tf.summary.create_file_writer(config.model_dir)
        meter = ThroughputMeter(self.global_batch_size, config.warmup_steps)
        stats = TrainStats()
        iterator = iter(dataset)
        progress = _progress(run_iter, "train", config.no_progress or not self.distribution.is_chief)
        stopped_by_signal = False
        with StopRequest() as stop:
            for index in range(run_iter):
                start = time.perf_counter()
                images, labels = next(iterator)
                outputs = train_step(images, labels)
                values = {key: value.numpy() for key, value in outputs.items()}
                elapsed = time.perf_counter() - start
                step = int(self.global_step.numpy())
                meter.add(elapsed)
                stats.check(values, step, self.loss_scaling, config.max_skipped_steps)
                if self.distribution.is_chief:
                    self._log_train_step(values, step, index, meter, steps_per_epoch, is_benchmark)
                    if writer is not None and step % SUMMARY_EVERY_STEPS == 0:
                        with writer.as_default(step=step):
                            for key in ("cross_entropy", "l2_loss", "total_loss", "learning_rate", "loss_scale"):
                                tf.summary.scalar(key, float(values[key]))
                            tf.summary.scalar("train_imgs_per_sec", meter.last_ips)
                    if saver is not None and step % config.checkpoint_interval == 0:
                        saver.save(step)
                if progress is not None:
                    progress.update(1)
                if self.distribution.any_worker_flag(stop.requested):
                    stopped_by_signal = True
                    break
        if progress is not None:
            progress.close()

        final_step = int(self.global_step.numpy())
        if saver is not None and self.distribution.is_chief and \
                not (saver.latest_checkpoint or "").endswith("-{}".format(final_step)):
            saver.save(final_step)
        if writer is not None:
            writer.flush()
        self.distribution.debug_dump_weights(  # test hook, only with RN50_DEBUG_WEIGHTS_DIR (utils/distributed.py)
            self.model.trainable_variables + optimizer.variables,
            self.model.non_trainable_variables + [self.global_step], final_step)
        if self.distribution.is_chief:
            if is_benchmark and meter.warmup_warning():
                log.print(meter.warmup_warning())
            log.log(step=(), data=meter.summary("train"))
            if stats.skipped_total:
                log.log(step=(), data={"skipped_steps": stats.skipped_total})
        log.print("Ending Model Training ...")
        if stopped_by_signal:
            raise TrainingInterrupted(int(self.global_step.numpy()))

    def _copy_labels_file(self):
        """Keeps the dataset's class names beside the checkpoints, so `predict` can name classes."""
        if self.config.data_dir is None:
            return
        source = os.path.join(self.config.data_dir, "labels.txt")
        target = os.path.join(self.config.model_dir, "labels.txt")
        if os.path.isfile(source) and not os.path.exists(target):
            shutil.copyfile(source, target)

    def _log_train_step(self, values, step, index, meter, steps_per_epoch, is_benchmark):
        config = self.config
        if is_benchmark:
            if index >= config.warmup_steps and (index - config.warmup_steps + 1) % config.display_every == 0:
                self.logger.log(step=(0, index + 1), data={"total_ips": meter.last_ips})
            return
        epoch = int((step - 1) // steps_per_epoch)
        if index % config.display_every == 0:
            self.logger.log(step=(epoch, step), data={
                "imgs_per_sec": meter.last_ips,
                "cross_entropy": float(values["cross_entropy"]),
                "l2_loss": float(values["l2_loss"]),
                "total_loss": float(values["total_loss"]),
                "learning_rate": float(values["learning_rate"]),
            })
        if int(step // steps_per_epoch) > int((step - 1) // steps_per_epoch):
            self.logger.log(step=(epoch,), data={
                "cross_entropy": float(values["cross_entropy"]),
                "l2_loss": float(values["l2_loss"]),
                "total_loss": float(values["total_loss"]),
                "learning_rate": float(values["learning_rate"]),
            })

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, iter_unit, num_iter, batch_size, is_benchmark=False, export_dir=None):
        config = self.config
        log = self.logger
        if config.data_dir is None and not is_benchmark:
            raise UserError("`data_dir` must be specified for evaluation!")
        if config.data_dir is None:
            num_steps, num_epochs, num_decay_steps = num_iter, 1, num_iter
        else:
            filenames = runner_utils.list_filenames_in_dataset(config.data_dir, "validation")
            num_samples = runner_utils.count_samples(filenames, "Validation", log.print)
            num_steps, num_epochs, num_decay_steps = runner_utils.count_steps(
                iter_unit, num_samples, num_iter, batch_size)
        dataset = self._eval_dataset(batch_size)
        self.restore_for_inference(required=not is_benchmark)

        log.print("Starting Model Evaluation...")
        log.print("Evaluation Epochs", num_epochs)
        log.print("Evaluation Steps", num_steps)
        log.print("Decay Steps", num_decay_steps)
        log.print("Global Batch Size", batch_size)

        model = self.model

        @tf.function(jit_compile=config.xla or None)
        def eval_step(images, labels):
            logits = model(images, training=False)
            loss = losses.softmax_cross_entropy(tf.one_hot(labels, config.num_classes), logits)
            return losses.top_k_hits(labels, logits, 1), losses.top_k_hits(labels, logits, 5), loss

        meter = ThroughputMeter(batch_size, config.warmup_steps)
        top1 = top5 = seen = 0
        iterator = iter(dataset)
        progress = _progress(num_steps, "eval", config.no_progress)
        for index in range(num_steps):
            start = time.perf_counter()
            images, labels = next(iterator)
            hits1, hits5, _ = eval_step(images, labels)
            hits1, hits5 = int(hits1.numpy()), int(hits5.numpy())
            meter.add(time.perf_counter() - start)
            top1 += hits1
            top5 += hits5
            seen += int(labels.shape[0])
            if is_benchmark and index >= config.warmup_steps and \
                    (index - config.warmup_steps + 1) % config.display_every == 0:
                log.log(step=(0, index + 1), data={"total_ips": meter.last_ips})
            if progress is not None:
                progress.update(1)
        if progress is not None:
            progress.close()
        if config.data_dir is not None:
            log.print(evaluated_images_line(seen, num_samples, num_epochs, iter_unit, batch_size))
        if is_benchmark and meter.warmup_warning():
            log.print(meter.warmup_warning())
        results = {"top1_accuracy": top1 / max(seen, 1), "top5_accuracy": top5 / max(seen, 1)}
        results.update(meter.summary("eval"))
        results.update(meter.latencies())
        log.log(step=(), data=results)
        if not is_benchmark and self.distribution.is_chief:
            # TensorBoard beside the training scalars (the Estimator's model_dir/eval), at the evaluated step.
            writer = tf.summary.create_file_writer(os.path.join(config.model_dir, "eval"))
            with writer.as_default(step=int(self.global_step.numpy())):
                for key in ("top1_accuracy", "top5_accuracy", "eval_throughput"):
                    tf.summary.scalar(key, results[key])
            writer.close()
        log.print("Model evaluation finished")
        if export_dir:
            self.exported_path = self.export(export_dir)
            log.log(step=(), data={"export_dir": self.exported_path})
        return results

    # ------------------------------------------------------------------ predict
    def predict(self, to_predict, labels_file=None):
        """Prints the top-5 classes of every image of `to_predict` (a file, or a directory's image files in
        sorted order), predicted in batches of --batch_size, then `predicted N, failed M`; returns PredictCounts.

        A single file that cannot be used is a UserError (before the checkpoint is read). In a directory each
        such file gets one `SKIPPED <path>: <reason>` line on stderr and the others are still predicted.
        """
        config = self.config
        files = runner_utils.parse_inference_input(to_predict)
        size = config.image_size
        if os.path.isfile(to_predict):
            data_utils.load_inference_image(files[0], size, size)
        self.restore_for_inference(required=True)
        class_names = load_class_names(labels_file, config)
        model = self.model

        @tf.function(input_signature=[tf.TensorSpec([None, size, size, 3], tf.float32)])
        def infer(images):
            return tf.nn.softmax(tf.cast(model(images, training=False), tf.float32))

        counts = PredictCounts()

        def skip(path, reason):
            counts.failed += 1
            print("SKIPPED {}: {}".format(path, reason), file=sys.stderr, flush=True)

        for images, names in data_utils.iter_inference_batches(files, size, size, config.batch_size, skip):
            probabilities = infer(images).numpy()
            for probs, name in zip(probabilities, names):
                top = np.argsort(-probs, kind="stable")[:5]
                print(format_prediction(name, probs, top, class_names), flush=True)
            counts.predicted += len(names)
        print("Ending Inference ...", flush=True)
        print("predicted {}, failed {}".format(counts.predicted, counts.failed), flush=True)
        return counts

    # ------------------------------------------------------------------ export
    def export(self, export_dir):
        """SavedModel with `serving_default` and `predict` (docs/ORIGINAL.md#savedmodel-export) in a timestamped
        subdirectory, written to a temporary name first so an interrupted export never leaves a half SavedModel
        under the final name."""
        size = self.config.input_size
        model = self.model
        module = tf.Module()
        module.model = model

        @tf.function(input_signature=[tf.TensorSpec([None, size, size, 3], tf.float32, name="input")])
        def serve(input):  # noqa: A002 - the signature's input key is "input", as the original's receiver
            logits = tf.cast(model(input, training=False), tf.float32)
            return {"classes": tf.argmax(logits, axis=1, output_type=tf.int32),
                    "probabilities": tf.nn.softmax(logits)}

        module.serve = serve
        os.makedirs(export_dir, exist_ok=True)
        stamp = str(int(time.time()))
        final = os.path.join(export_dir, stamp)
        while os.path.exists(final):
            stamp = str(int(stamp) + 1)
            final = os.path.join(export_dir, stamp)
        temporary = os.path.join(export_dir, ".tmp-" + stamp)
        shutil.rmtree(temporary, ignore_errors=True)
        try:
            tf.saved_model.save(module, temporary, signatures={"serving_default": serve, "predict": serve})
            os.replace(temporary, final)
        except (OSError, tf.errors.OpError) as error:
            shutil.rmtree(temporary, ignore_errors=True)
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise UserError("cannot write the SavedModel under {}: {}".format(export_dir, first[:300])) from None
        return final


class TrainingInterrupted(Exception):
    """Training stopped on a signal after writing a checkpoint at `step`."""

    def __init__(self, step):
        super().__init__("training stopped by a signal at step {}; checkpoint written".format(step))
        self.step = step


class TrainStats:
    """Non-finite checks: in fp32 a non-finite loss stops the run; with dynamic loss scaling skipped steps are
    counted and too many in a row stop it."""

    def __init__(self):
        self.skipped_total = 0
        self.skipped_in_a_row = 0

    def check(self, values, step, loss_scaling, max_skipped):
        if loss_scaling == "dynamic":
            if bool(values["skipped"]):
                self.skipped_total += 1
                self.skipped_in_a_row += 1
                if self.skipped_in_a_row >= max_skipped:
                    raise UserError("{} training steps in a row had non-finite gradients (last at step {}); "
                                    "stopping. The last checkpoint is kept.".format(self.skipped_in_a_row, step))
            else:
                self.skipped_in_a_row = 0
        elif not math.isfinite(float(values["total_loss"])):
            raise UserError("the loss became {} at step {}; stopping. The last good checkpoint is kept "
                            "(lower --lr_init or check the data).".format(float(values["total_loss"]), step))


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
        if not 0 < len(self.times) <= self.warmup:
            return None
        return ("WARNING: {} step(s) ran, not more than --warmup_steps {}: the throughput and latency figures "
                "count all of them, warm-up included (run more than {} steps for a steady-state figure)".format(
                    len(self.times), self.warmup, self.warmup))

    def summary(self, prefix):
        times = self._measured()
        if not times:
            return {prefix + "_throughput": 0.0, prefix + "_throughput_total": 0.0}
        return {
            prefix + "_throughput": float(np.mean([self.batch_size / t for t in times])),
            prefix + "_throughput_total": float(self.batch_size * len(times) / np.sum(times)),
        }

    def latencies(self):
        times = np.array(self._measured()) * 1000.0
        if times.size == 0:
            return {}
        return {
            "eval_latency_avg": float(np.mean(times)),
            "eval_latency_p90": float(np.quantile(times, 0.9)),
            "eval_latency_p95": float(np.quantile(times, 0.95)),
            "eval_latency_p99": float(np.quantile(times, 0.99)),
        }


def prefetch_to_accelerator(dataset, uses_dali):
    """GPU, one replica in this process, tf.data input: keep the next 2 batches already on the GPU (the
    original's host + device StagingAreas, docs/ORIGINAL.md#input-pipeline), so the step never waits for a
    host-to-device copy.
    No-op on CPU, for DALI (its batches are produced on the GPU) and for distributed datasets (MirroredStrategy
    prefetches to each replica's device itself)."""
    if uses_dali or not isinstance(dataset, tf.data.Dataset):
        return dataset
    gpus = tf.config.list_logical_devices("GPU")
    if not gpus:
        return dataset
    return dataset.apply(tf.data.experimental.prefetch_to_device(gpus[0].name, buffer_size=2))


def quantization_config(config):
    """QAT settings for resnet.build_model (None without --quantize); training calls quantise, evaluation,
    predict and export run the float path (docs/ORIGINAL.md#quantisation-aware-training)."""
    if not config.quantize:
        return None
    from model.layers.quantization import QuantizationConfig
    return QuantizationConfig(symmetric=config.symmetric, use_qdq=config.use_qdq, quant_delay=config.quant_delay)


def precision_policy(amp):
    """`--amp`: float16 compute on GPU, bfloat16 on CPU (no float16 kernels worth using there)."""
    if not amp:
        return None
    return "mixed_float16" if tf.config.list_logical_devices("GPU") else "mixed_bfloat16"


def loss_scaling_mode(config):
    """"static" with --static_loss_scale X under AMP, "dynamic" for float16 AMP otherwise, else None.
    bfloat16 has float32's exponent range, so it needs no dynamic scaling (a static scale is still honoured)."""
    if not config.amp:
        return None
    if config.static_loss_scale != -1:
        return "static"
    return "dynamic" if precision_policy(True) == "mixed_float16" else None


def load_class_names(labels_file, config, warn=None):
    candidates = [labels_file] if labels_file else [
        os.path.join(config.model_dir, "labels.txt"),
        os.path.join(config.data_dir, "labels.txt") if config.data_dir else None]
    for path in candidates:
        if path and os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                names = [line.strip() for line in handle if line.strip()]
            _check_class_names(path, names, config.num_classes, warn)
            return names
    if labels_file:
        raise UserError("--labels_file {} does not exist".format(labels_file))
    return None


def _check_class_names(path, names, num_classes, warn=None):
    """One warning when the labels file names fewer classes than the model has outputs. 1000 names for 1001
    outputs is the ImageNet layout (labels 1..1000 -> outputs 0..999; output 1000 is never a label) and passes."""
    if len(names) >= num_classes or (num_classes == 1001 and len(names) == 1000):
        return
    (warn or _print_stderr)("WARNING: labels file {} names {} classes but the model has {} outputs; outputs {}..{} "
                            "are shown by number only".format(path, len(names), num_classes, len(names),
                                                             num_classes - 1))


def _print_stderr(message):
    print(message, file=sys.stderr, flush=True)


def evaluated_images_line(seen, num_samples, num_epochs, iter_unit, batch_size):
    """How much of the validation set an evaluation covered. Batches are whole (drop_remainder, as the original),
    so up to batch_size - 1 images of every pass are left out."""
    if iter_unit != "epoch":
        return "Evaluated {:,} images ({:,} batches of {}) of the {:,} in the validation set".format(
            seen, seen // batch_size, batch_size, num_samples)
    total = num_samples * num_epochs
    line = "Evaluated {:,} of {:,} images".format(seen, total)
    dropped = total - seen
    if dropped > 0 and num_epochs == 1:
        line += " (the last partial batch of {:,} is dropped, as the original)".format(dropped)
    elif dropped > 0:
        line += " ({:,} epochs of {:,} in whole batches of {}: {:,} left out, as the original)".format(
            num_epochs, num_samples, batch_size, dropped)
    return line


class PredictCounts:
    """What `Runner.predict` did: files predicted, and files skipped because they could not be used."""

    def __init__(self):
        self.predicted = 0
        self.failed = 0


def format_prediction(filename, probabilities, top, class_names):
    parts = []
    for index in top:
        name = ""
        if class_names is not None and index < len(class_names):
            name = " ({})".format(class_names[index])
        parts.append("{}{} {:.4f}".format(index, name, probabilities[index]))
    return "{}: {}".format(filename, ", ".join(parts))


def _progress(total, description, disabled):
    if not progress_enabled(disabled):
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc=description, leave=False)


def set_seeds(seed, rank):
    """Per-rank seeding (docs/ORIGINAL.md#seeds): seed * 2 + rank for Python, NumPy and TF."""
    if seed is None:
        return
    keras.utils.set_random_seed(seed * 2 + rank)
