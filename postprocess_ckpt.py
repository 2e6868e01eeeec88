"""Classifier dense kernel [C, N] -> 1x1 conv kernel [1, 1, C, N] in a checkpoint (SPEC §2.5 / §8.3).

    python postprocess_ckpt.py --input results/model.ckpt-1000 --output results_final_conv
    python postprocess_ckpt.py --input nvidia_rn50_qat/model.ckpt-5005 --output out   # the original's TF1 format

The result is loaded by a model built with --use_final_conv (export_frozen_graph.py --use_final_conv).
- Our object-based checkpoints (prefix or model_dir): the model is rebuilt with the dense head, restored, copied into
  a model with the 1x1-conv head (the kernel reshaped; the QAT ranges too, when present) and saved with the same
  object structure as `<output>/model.ckpt-<global_step>` plus a `checkpoint` file. global_step is kept; optimizer
  slots are NOT carried over (their layout belongs to the dense model's optimizer): the output is for export and
  evaluation, or for a fresh fine-tuning run (which, like the original's --finetune_checkpoint, restarts momentum).
  --arch and --num_classes are read from the checkpoint; --dense_layer does not apply.
- The original's TF1 name-based checkpoints: every variable is copied unchanged (BN statistics, Momentum slots,
  global_step) except --dense_layer, reshaped with the shape read from the checkpoint (the original hard-coded
  2048x1001), into `<output>/new.ckpt` with a `checkpoint` file, as the original.
The output directory must not exist (the original failed on it too), unless --overwrite.
"""
import argparse
import os
import re
import sys

from utils.errors import UserError, command

OPERATION_KEY = re.compile(r"^model/_operations/(\d+)/")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--input", required=True, help="checkpoint prefix (or our model_dir) with a dense classifier")
    parser.add_argument("--dense_layer", default="resnet50/output/dense/kernel",
                        help="TF1 checkpoints: name of the dense kernel variable to reshape")
    parser.add_argument("--output", default="output_dir", help="output directory (must not exist)")
    parser.add_argument("--overwrite", action="store_true", help="write into an existing output directory")
    return parser.parse_args(argv)


def _prepare_output(output, overwrite):
    if os.path.exists(output) and not overwrite:
        raise UserError(f"--output {output} already exists; choose another directory or pass --overwrite")
    os.makedirs(output, exist_ok=True)


# ---------------------------------------------------------------- the original's TF1 checkpoints

def convert_tf1(path, dense_layer, output):
    import numpy as np
    import tensorflow as tf
    reader = tf.train.load_checkpoint(path)
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    if dense_layer not in shapes:
        candidates = sorted(name for name in shapes if name.endswith("output/dense/kernel"))
        raise UserError(f"--dense_layer {dense_layer} is not in {path}"
                        + (f" (it has {', '.join(candidates)})" if candidates else ""))
    if len(shapes[dense_layer]) != 2:
        raise UserError(f"{dense_layer} has shape {shapes[dense_layer]}, not [C, N]: already converted?")
    prefix = os.path.join(output, "new.ckpt")
    with tf.Graph().as_default():
        variables, feeds = {}, {}
        for name in sorted(shapes):
            value = reader.get_tensor(name)
            if name == dense_layer:
                value = np.reshape(value, [1, 1, *shapes[name]])
            placeholder = tf.compat.v1.placeholder(dtypes[name], value.shape)
            variables[name] = tf.compat.v1.Variable(placeholder, name=name.replace(":", "_"))
            feeds[placeholder] = value
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer(), feed_dict=feeds)
            saver.save(session, prefix, write_meta_graph=False, write_state=False)
    with open(os.path.join(output, "checkpoint"), "w", encoding="utf-8") as handle:
        handle.write('model_checkpoint_path: "new.ckpt"\nall_model_checkpoint_paths: "new.ckpt"\n')
    return prefix


# ---------------------------------------------------------------- our object-based checkpoints

def object_paths(path):
    """{object path: shape} of every saved variable under `model/`, by its object-graph path.

    A runner checkpoint saves each variable once under the first path the saver found (often
    `optimizer/_trainable_variables/N`); the object graph still records the `model/...` path to it.
    """
    import tensorflow as tf
    from tensorflow.core.protobuf import trackable_object_graph_pb2
    reader = tf.train.load_checkpoint(path)
    shapes = reader.get_variable_to_shape_map()
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    found = {}

    def walk(node_id, prefix, depth):
        node = graph.nodes[node_id]
        for attribute in node.attributes:
            if attribute.name == "VARIABLE_VALUE" and attribute.checkpoint_key in shapes:
                found[prefix] = shapes[attribute.checkpoint_key]
        if depth < 12:
            for child in node.children:
                walk(child.node_id, f"{prefix}/{child.local_name}" if prefix else child.local_name, depth + 1)

    root = graph.nodes[0]
    for child in root.children:
        if child.local_name == "model":
            walk(child.node_id, "model", 0)
    return {name + "/.ATTRIBUTES/VARIABLE_VALUE": shape for name, shape in found.items()}


def infer_model_settings(shapes):
    """(arch, num_classes, input_normalized, quantized) from an object-based checkpoint's keys and shapes."""
    keys = list(shapes)
    blocks = {OPERATION_KEY.match(k).group(1) for k in keys if OPERATION_KEY.match(k) and "/bottleneck_1/" in k}
    if any("/se/" in k for k in keys):
        arch = "se-resnext101-32x4d"
    elif len(blocks) == 16:
        arch = "resnet50"
    elif len(blocks) == 33:
        arch = "resnext101-32x4d"
    else:
        raise UserError(f"cannot tell the architecture of this checkpoint ({len(blocks)} bottleneck blocks)")
    operations = [int(OPERATION_KEY.match(k).group(1)) for k in keys if OPERATION_KEY.match(k)]
    head = max(operations)
    kernel = [shape for k, shape in shapes.items()
              if k.startswith(f"model/_operations/{head}/dense/") and "kernel" in k and "OPTIMIZER_SLOT" not in k]
    if len(kernel) != 1:
        raise UserError("cannot find the classifier kernel in this checkpoint")
    if len(kernel[0]) != 2:
        raise UserError(f"the classifier kernel has shape {kernel[0]}: this checkpoint already has a 1x1-conv head")
    stem = min(int(OPERATION_KEY.match(k).group(1)) for k in keys
               if OPERATION_KEY.match(k) and "/conv/" in k)
    # Layer 0 is the Input; without --dali the input normalisation (no variables) comes next, then the stem conv.
    input_normalized = stem == 1
    quantized = any("quant" in k for k in keys)
    return arch, int(kernel[0][1]), input_normalized, quantized


def convert_ours(path, output):
    import tensorflow as tf
    from model import checkpoint_io, resnet
    from model.layers.quantization import QuantizationConfig
    shapes = checkpoint_io.checkpoint_shapes(path)
    arch, num_classes, input_normalized, quantized = infer_model_settings(object_paths(path))

    def build(final_conv):
        return resnet.build_model(arch, num_classes=num_classes, use_final_conv=final_conv,
                                  input_normalized=input_normalized,
                                  quantization=QuantizationConfig() if quantized else None)

    source = build(False)
    checkpoint_io.restore_ours(source, path, f"{arch} with {num_classes} classes")
    global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    if "global_step/.ATTRIBUTES/VARIABLE_VALUE" in shapes:
        global_step.assign(tf.train.load_checkpoint(path).get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE"))
    target = build(True)
    checkpoint_io.copy_variables(source, target)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=target, global_step=global_step), output,
                                         max_to_keep=1, checkpoint_name="model.ckpt")
    return manager.save(checkpoint_number=int(global_step.numpy()))


def convert(args):
    from model import checkpoint_io
    path = checkpoint_io.resolve_checkpoint(args.input, "--input")
    object_based = checkpoint_io.is_object_based(path)
    _prepare_output(args.output, args.overwrite)
    if object_based:
        return convert_ours(path, args.output)
    return convert_tf1(path, args.dense_layer, args.output)


@command
def main(argv=None):
    written = convert(parse_args(argv))
    print(f"Wrote {written}")
    print("Rewriting checkpoint completed")


if __name__ == "__main__":
    sys.exit(main())
