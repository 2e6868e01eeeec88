"""Shared pieces of the benchmarks: our train and eval steps, the keras.applications peer, interleaved timing, FLOPs.

Every benchmark here times its variants *interleaved* (A B C A B C ...) in one process and reports medians, so
that the load other processes put on the machine hits all variants alike; the load average is recorded with
every result.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from utils import devices  # noqa: E402


# Training = forward + two backward matmuls (input and weight gradients) ~ 3x forward.
TRAIN_FLOP_FACTOR = 3


def forward_gflop(arch, image_size, num_classes=1001):
    """The model's forward GFLOP per image (2 x its conv and dense multiply-adds, `model.resnet.forward_macs`: the
    nominal count, without the zeros that SAME padding adds to a patches product); ResNet-50 at 224: 8.18."""
    from model.resnet import forward_macs
    return 2 * sum(forward_macs(arch, num_classes, image_size).values()) / 1e9


def machine_info():
    flags = ""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    flags = line.split(":", 1)[1].split()
                    break
    except OSError:
        model = platform.processor()
    import tensorflow as tf
    from runtime import startup
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "cpu": model,
        "cores": os.cpu_count(),
        "simd": sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "f16c"))),
        "tensorflow": tf.__version__,
        "onednn_opts": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on)"),
        "cpu_allocator": "pooled (BFC)" if devices.cpu_memory_pooled() else "malloc",
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        # the variables a run's PARAMETER record lists (threads, oneDNN's switches, ...): set ones only
        "variables": startup.recorded_variables(),
        "code_version": startup.code_version(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


def minor_faults():
    """The minor page faults this process has taken so far (memory mapped in on first touch)."""
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def interleaved(variants, rounds, warmup=1, log=print, faults=None):
    """Runs `variants` ({name: callable doing one step and fetching its result}) `warmup` times each, then
    `rounds` times each in the order A B C A B C ...; returns {name: [seconds, ...]} of the measured runs. A dict
    given as `faults` gets {name: [minor page faults, ...]} of the same runs."""
    for name, step in variants.items():
        for index in range(warmup):
            start = time.perf_counter()
            step()
            log(f"  warmup {name} #{index}: {time.perf_counter() - start:.2f} s")
    times = {name: [] for name in variants}
    faulted = {name: [] for name in variants}
    for index in range(rounds):
        for name, step in variants.items():
            before = minor_faults()
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
            faulted[name].append(minor_faults() - before)
            log(f"  round {index} {name}: {times[name][-1]:.3f} s  load {os.getloadavg()[0]:.1f}  "
                f"page faults {faulted[name][-1]}")
    if faults is not None:
        faults.update(faulted)
    return times


def median(values):
    return statistics.median(values)


class OurModel:
    """What main.py --mode training_benchmark sets up in one process: config, platform, precision and the model
    (runtime/startup.py). `purpose` and `kernels` pick the conv formulations (model/kernels.py)."""

    def __init__(self, arch="resnet50", batch_size=32, image_size=224, xla=False, amp=False, num_classes=1001,
                 purpose="train", kernels=None, **extra):
        from runtime import startup
        from runtime.config import RunConfig
        self.config = RunConfig(arch=arch, mode="training_benchmark", batch_size=batch_size, image_size=image_size,
                                synthetic_data_size=image_size, xla=xla, amp=amp, num_classes=num_classes, **extra)
        self.platform, self.precision = startup.set_up(self.config)
        self.model = startup.build_model(self.config, self.platform, self.precision, purpose=purpose, kernels=kernels)


def our_train_state(ours, num_steps=1000):
    """The TrainState main.py's training builds (runtime/train_state.create_train_state) around `ours.model`, for a
    single-process run of `num_steps` steps of one epoch."""
    from runtime import inputs, train_state
    from utils import distributed
    length = inputs.TrainingLength(num_steps, 1, num_steps, float(num_steps))
    return train_state.create_train_state(ours.config, ours.platform, ours.precision, distributed.single_process(),
                                          length, model=ours.model, mixup_seed=0)


def our_train_step(ours):
    """The train step of `our_train_state(ours)`: a callable(images, labels) -> dict."""
    return our_train_state(ours).train_step


def our_eval_step(ours, xla=None):
    """The model call of `Runner.evaluate`'s eval step (runtime/train_step.make_eval_step), logits only."""
    import tensorflow as tf
    model = ours.model

    @tf.function(jit_compile=(ours.config.xla if xla is None else xla) or None)
    def eval_step(images):
        return model(images, training=False)
    return eval_step


def keras_resnet50(num_classes=1001, image_size=224):
    import keras
    return keras.applications.ResNet50(weights=None, classes=num_classes, input_shape=(image_size, image_size, 3))


def keras_train_step(model, jit_compile=False):
    """A plain tf.function step for a Keras model: SGD momentum 0.9, softmax cross-entropy."""
    import keras
    import tensorflow as tf
    optimizer = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=False)

    @tf.function(jit_compile=jit_compile or None)
    def step(images, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss
    return step


def synthetic_batch(batch_size, image_size, num_classes=1001, seed=0):
    import tensorflow as tf
    generator = tf.random.Generator.from_seed(seed)
    images = generator.uniform([batch_size, image_size, image_size, 3], 0, 255)
    labels = generator.uniform([batch_size], 0, num_classes, dtype=tf.int32)
    return images, labels


def fetch(value):
    """Brings a step's outputs to the host (what main.py's loop does every step)."""
    import tensorflow as tf
    return tf.nest.map_structure(lambda t: t.numpy(), value)


def report(path, payload):
    """Adds the load average at the end to `payload`, prints it as one JSON line and writes it to `path` (if any)."""
    payload["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(payload))
    write_json(path, payload)


def write_json(path, payload):
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as handle:
        json.dump(payload, handle, indent=1)


class FrozenGraph:
    """A frozen graph of export_frozen_graph.py run as it records it must be fed: its input layout (NHWC or NCHW,
    from the placeholder's shape, as inference.py reads an ONNX model's), its `input_pixels` (raw or normalised),
    its one output node; its input size and classes from its `source` record, else from its shapes. UserError for a
    graph that does not say what input it takes, or is not one image batch in and one output out."""

    def __init__(self, path):
        import tensorflow as tf
        from inference import input_feed, onnx_input_layout
        from model import export
        from utils.errors import UserError
        graph_def = export.load_graph_def(path)
        inputs, outputs = export.graph_def_io(graph_def)
        if len(inputs) != 1 or len(outputs) != 1:
            raise UserError(f"{path}: expected one placeholder and one output, got {inputs} -> {outputs}")
        recorded = export.graph_source(graph_def, path)
        self.source = recorded or {}
        facts = export.graph_facts(graph_def)  # what the record is held to
        placeholder = next(node for node in graph_def.node if node.name == inputs[0])
        shape = [dim.size for dim in placeholder.attr["shape"].shape.dim]
        self.layout, side = onnx_input_layout(shape)
        if self.layout is None:
            raise UserError(f"{path}: its input {shape} is not an image batch with 3 channels first or last")
        if side is not None:  # the graph's own size first; a record that contradicts it is refused below
            self.source = export.agreeing_source(recorded, f"{path}'s node {export.SOURCE_NODE}", side,
                                                **facts) or {}
        self.image_size = side or self.source.get("image_size")
        if not self.image_size:
            raise UserError(f"{path}: its input {shape} has no fixed size and the graph records none")
        self.input_pixels = export.graph_input_pixels(graph_def)
        if self.input_pixels is None:
            raise UserError(f"{path} does not record whether it takes raw or normalised pixels (the original's "
                            "graph, or an earlier export's): export it again with export_frozen_graph.py")
        if self.input_pixels not in (export.RAW, export.NORMALIZED):
            raise UserError(f"{path} records input_pixels {self.input_pixels!r}, which this version does not know")
        self.normalize = input_feed(self.input_pixels)
        spec = ([None, 3, self.image_size, self.image_size] if self.layout == "NCHW"
                else [None, self.image_size, self.image_size, 3])
        self.function = tf.compat.v1.wrap_function(
            lambda x: tf.graph_util.import_graph_def(graph_def, input_map={inputs[0] + ":0": x},
                                                     return_elements=[outputs[0] + ":0"])[0],
            [tf.TensorSpec(spec, tf.float32)])
        outputs = self.function.outputs[0].shape[-1]
        if self.source and outputs is not None:
            self.source = export.agreeing_source(self.source, f"{path}'s node {export.SOURCE_NODE}", None,
                                                outputs, **facts) or {}
        self.num_classes = outputs or self.source.get("num_classes")

    def prepare(self, images):
        """Raw 0..255 NHWC images (the eval pipeline's) -> the graph's input: normalised if it takes normalised
        pixels, NCHW if its placeholder is."""
        import numpy as np
        images = np.asarray(images, np.float32)
        if self.normalize is not None:
            images = self.normalize(images)
        if self.layout == "NCHW":
            images = np.ascontiguousarray(images.transpose(0, 3, 1, 2))
        return images

    def __call__(self, prepared):
        """Probabilities [N, K] of a batch already `prepare`d."""
        return self.function(prepared).numpy()

    def validation_batches(self, data_dir, batch_size):
        """(batch `prepare`d for the graph, labels [n] 0-based) over the validation split of `data_dir`, every image
        once: the eval stream repeats in whole batches, so the last is cut to the images left (a split smaller than
        a batch too)."""
        from runtime import runner_utils
        from utils import data_utils
        filenames = runner_utils.list_filenames_in_dataset(data_dir, "validation")
        total = sum(runner_utils.count_records(name) for name in filenames)
        dataset = data_utils.get_tfrecords_input_fn(filenames, batch_size, self.image_size, self.image_size,
                                                    training=False, num_threads=2, deterministic=True,
                                                    num_classes=self.num_classes)
        seen = 0
        for images, labels in dataset.take(-(-total // batch_size)):
            images, labels = images.numpy()[:total - seen], labels.numpy()[:total - seen]
            seen += len(labels)
            yield self.prepare(images), labels
