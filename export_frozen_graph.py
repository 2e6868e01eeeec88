"""Frozen GraphDef of a model for deployment (TensorRT, ONNX), docs/ORIGINAL.md#frozen-graph.

    python export_frozen_graph.py --model_name resnet50 --checkpoint results/model.ckpt-1000 \
        --output_file rn50.pb [--quantize --use_qdq --symmetric --use_final_conv] [--input_format NHWC]

Graph: placeholder `input` float32 [batch_size, 3, S, S] (NCHW) or [batch_size, S, S, 3] (NHWC) -> network in
--compute_format -> node `<model_name>/output/softmax` (float32 probabilities). Differences from the original,
which built only ResNet-50 correctly and left the normalisation out (docs/ORIGINAL.md#known-bugs-of-the-original):
every architecture is built with
its own cardinality/SE, and the raw-pixel normalisation is inside the graph unless `--no_normalization`.
--quantize builds the QAT eval graph: BN folded into the conv weights, weights and activations fake-quantised with
the trained ranges (model/layers/quantization.py). --checkpoint takes our checkpoints (prefix or directory) or the
original's TF1 checkpoints; without it the weights are random.
--compute_format NCHW on a machine without a GPU still writes the graph (it is only traced, not run) and says
that the graph needs a GPU (TensorFlow's CPU kernels are NHWC-only).
"""
import argparse
import os
import sys

from utils import quiet
from utils.errors import command

FORMATS = ("NCHW", "NHWC")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--model_name", default="resnet50",
                        choices=["resnet50", "resnext101-32x4d", "se-resnext101-32x4d"])
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--num_classes", type=int, default=1001)
    parser.add_argument("--batch_size", type=int, default=None, help="placeholder batch dim (default: dynamic)")
    parser.add_argument("--input_format", default="NCHW", choices=FORMATS)
    parser.add_argument("--compute_format", default="NCHW", choices=FORMATS)
    parser.add_argument("--checkpoint", default="", help="checkpoint prefix or directory; empty = random weights")
    parser.add_argument("--output_file", default="", help="output GraphDef path (required)")
    parser.add_argument("--quantize", action="store_true", help="QAT eval graph (fake-quant + folded BN)")
    parser.add_argument("--symmetric", action="store_true")
    parser.add_argument("--use_qdq", action="store_true", help="QuantizeAndDequantizeV4 instead of FakeQuant ops")
    parser.add_argument("--use_final_conv", action="store_true", help="1x1 conv classifier")
    parser.add_argument("--write_text_graphdef", action="store_true", help="write a text (pbtxt) GraphDef")
    parser.add_argument("--no_normalization", action="store_true",
                        help="leave the input normalisation out (the original's frozen graph expects normalised "
                             "input)")
    quiet.add_verbose_flag(parser)
    args = parser.parse_args(argv)
    if not args.output_file:
        parser.error("--output_file is required")
    if args.image_size < 32:
        parser.error("--image_size must be >= 32")
    if args.batch_size is not None and args.batch_size < 1:
        parser.error("--batch_size must be >= 1")
    if (args.symmetric or args.use_qdq) and not args.quantize:
        parser.error("--symmetric and --use_qdq only take effect with --quantize")
    return args


def output_node_name(arch):
    return f"{arch}/output/softmax"


def use_native_convolutions(model):
    """Switch every conv of `model` to one `tf.nn.conv2d` (same variables, same numbers), as the original's graph.

    On CPU the model trains with 1x1 convs as matmuls, small kxk convs as patches + matmul and grouped convs as
    per-group convs (model/layers/conv.py, grouped_conv.py). Forward-only calls already use plain convs; this also
    covers the QAT eval graph, which calls the conv ops directly. Grouped convs become one grouped Conv2D with a
    GPU visible (as the original's graph) and per-group plain convs on CPU, where TF cannot run a frozen grouped
    Conv2D (model/layers/grouped_conv.py).
    """
    import tensorflow as tf
    from model.layers.conv import Conv2D
    from model.layers.grouped_conv import GroupedConv2D
    on_gpu = bool(tf.config.list_logical_devices("GPU"))
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, Conv2D):
            layer.implementation = "native"
        elif isinstance(layer, GroupedConv2D) and layer.implementation != "native":
            layer.implementation = "native" if on_gpu else "per_group_conv"
    return model


def build_export_model(args, quantization=None):
    from model import resnet
    model = resnet.build_model(
        args.model_name, num_classes=args.num_classes, compute_format=args.compute_format,
        use_final_conv=args.use_final_conv, input_normalized=args.no_normalization, image_size=args.image_size,
        allow_nchw_on_cpu=True, quantization=quantization)
    return use_native_convolutions(model)


def quantization_config(args):
    if not args.quantize:
        return None
    from model.layers.quantization import QuantizationConfig
    return QuantizationConfig(symmetric=args.symmetric, use_qdq=args.use_qdq, quantized_inference=True)


def probabilities_function(model, arch, image_size, input_format="NHWC", batch_size=None):
    """tf.function: images in `input_format` -> softmax probabilities (inference call)."""
    import tensorflow as tf
    shape = [batch_size, 3, image_size, image_size] if input_format == "NCHW" else \
        [batch_size, image_size, image_size, 3]

    @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32, name="input")])
    def probabilities(images):
        if input_format == "NCHW":
            images = tf.transpose(images, [0, 2, 3, 1])
        logits = tf.cast(model(images, training=False), tf.float32)
        return tf.nn.softmax(logits)

    return probabilities


def freeze(concrete_function, output_name=None):
    """GraphDef with every variable turned into a constant; the single output node renamed to `output_name`."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
    frozen = convert_variables_to_constants_v2(concrete_function)
    graph_def = frozen.graph.as_graph_def()
    if output_name:
        outputs = [tensor.name.split(":")[0] for tensor in frozen.outputs]
        if len(outputs) != 1:
            raise ValueError(f"expected one output, got {outputs}")
        consumers = [node for node in graph_def.node if any(i.split(":")[0].lstrip("^") == outputs[0]
                                                               for i in node.input)]
        if consumers:
            raise ValueError(f"output node {outputs[0]} has consumers")
        for node in graph_def.node:
            if node.name == outputs[0]:
                node.name = output_name
    return graph_def


def write_graph_def(graph_def, path, as_text):
    import tensorflow as tf
    directory, name = os.path.split(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tf.io.write_graph(graph_def, directory, name, as_text=as_text)


def export(args, log=print):
    import tensorflow as tf
    from model import checkpoint_io
    quantization = quantization_config(args)
    model = build_export_model(args, quantization)
    if args.checkpoint:
        describe = (f"--model_name {args.model_name} --num_classes {args.num_classes} "
                    f"--use_final_conv {args.use_final_conv}")
        info = checkpoint_io.inspect(checkpoint_io.find_checkpoint(args.checkpoint, "--checkpoint", warn=log))
        checkpoint_io.check_fits(info, args.model_name, args.num_classes, arch_flag="--model_name")
        log(checkpoint_io.restore_model(model, info, args.model_name, describe).describe())
        if quantization is not None and not info.has_quantization_ranges:
            log("WARNING: the checkpoint has no quantisation ranges (not QAT-trained); activation ranges keep "
                "their initial [-6, 6]")
    else:
        log("No --checkpoint: exporting random weights")
    function = probabilities_function(model, args.model_name, args.image_size, args.input_format, args.batch_size)
    graph_def = freeze(function.get_concrete_function(), output_node_name(args.model_name))
    if any(node.op in ("VarHandleOp", "VariableV2", "ReadVariableOp") for node in graph_def.node):
        raise AssertionError("frozen graph still has variables")
    write_graph_def(graph_def, args.output_file, args.write_text_graphdef)
    log(f"Wrote {'text' if args.write_text_graphdef else 'binary'} GraphDef {args.output_file}: input "
        f"'input' {args.input_format}, output '{output_node_name(args.model_name)}'")
    if args.compute_format == "NCHW" and not tf.config.list_logical_devices("GPU"):
        log("NOTE: --compute_format NCHW: this graph needs a GPU to run (TensorFlow's CPU kernels are NHWC-only); "
            "use --compute_format NHWC for CPU")
    return graph_def


@command
def main(argv=None):
    export(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
