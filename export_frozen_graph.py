"""Frozen GraphDef of a model for deployment (TensorRT, ONNX), docs/ORIGINAL.md#frozen-graph.

    python export_frozen_graph.py --model_name resnet50 --checkpoint results/model.ckpt-1000 \
        --output_file rn50.pb [--quantize --use_qdq --symmetric --use_final_conv] [--input_format NHWC]

Graph: placeholder `input` float32 [batch_size, 3, S, S] (NCHW) or [batch_size, S, S, 3] (NHWC) -> network in
--compute_format -> node `<model_name>/output/softmax` (float32 probabilities). Differences from the original,
which built only ResNet-50 correctly and left the normalisation out (docs/ORIGINAL.md#known-bugs-of-the-original):
every architecture is built with
its own cardinality/SE, and the raw-pixel normalisation is inside the graph unless `--no_normalization`; the graph
records which (node `input_pixels`, carried into ONNX by export_onnx.py, read by inference.py).
--quantize builds the QAT eval graph: BN folded into the conv weights, weights and activations fake-quantised with
the trained ranges (model/layers/quantization.py). --checkpoint takes our checkpoints (prefix or directory) or the
original's TF1 checkpoints; without it the weights are random. With it, --model_name, --num_classes, --image_size and
the classifier form default to what the checkpoint records (a given flag must agree). --use_ema_weights exports the checkpoint's EMA weights
(--moving_average_decay) instead of its raw ones. The export itself is model/export.py's.
--compute_format NCHW on a machine without a GPU still writes the graph (it is only traced, not run) and says
that the graph needs a GPU (TensorFlow's CPU kernels are NHWC-only).
"""
import os
import sys

from model.arch_names import ARCH_NAMES
from runtime.config import given_options
from runtime.settings import classifier_form_note, reconcile
from utils import defaults, quiet
from utils.errors import ArgumentParser, command, doc_part, on_interrupt, printable
from utils.output_paths import check_output_file, check_tensorflow_path, earlier_file_kept

FORMATS = ("NCHW", "NHWC")


def parse_args(argv=None):
    parser = ArgumentParser(description=doc_part(__doc__, 0, "\n"), allow_abbrev=False)
    # Defaults apply without --checkpoint; with one, what it records (runtime/settings.reconcile).
    parser.add_argument("--model_name", default=defaults.ARCH, choices=ARCH_NAMES,
                        help=f"default: the checkpoint's, else {defaults.ARCH}")
    parser.add_argument("--image_size", type=int, default=defaults.IMAGE_SIZE,
                        help=f"default: the checkpoint's, else {defaults.IMAGE_SIZE}")
    parser.add_argument("--num_classes", type=int, default=defaults.NUM_CLASSES,
                        help=f"default: the checkpoint's, else {defaults.NUM_CLASSES}")
    parser.add_argument("--batch_size", type=int, default=None, help="placeholder batch dim (default: dynamic)")
    parser.add_argument("--input_format", default="NCHW", choices=FORMATS)
    parser.add_argument("--compute_format", default="NCHW", choices=FORMATS)
    parser.add_argument("--checkpoint", default="", help="checkpoint prefix or directory; empty = random weights")
    parser.add_argument("--output_file", required=True, help="output GraphDef path")
    parser.add_argument("--quantize", action="store_true", help="QAT eval graph (fake-quant + folded BN)")
    parser.add_argument("--symmetric", action="store_true")
    parser.add_argument("--use_qdq", action="store_true", help="QuantizeAndDequantizeV4 instead of FakeQuant ops")
    parser.add_argument("--use_final_conv", action="store_true",
                        help="1x1 conv classifier (default: the checkpoint's form)")
    parser.add_argument("--use_ema_weights", action="store_true",
                        help="the checkpoint's EMA weights (trained with --moving_average_decay) instead of its raw "
                             "ones")
    parser.add_argument("--write_text_graphdef", action="store_true", help="write a text (pbtxt) GraphDef")
    parser.add_argument("--no_normalization", action="store_true",
                        help="leave the input normalisation out (the original's frozen graph expects normalised "
                             "input)")
    quiet.add_verbose_flag(parser)
    args = parser.parse_args(argv)
    args.given = given_options(parser, argv)
    if not args.output_file:  # (an empty --output_file "")
        parser.error("--output_file must name a file")
    if args.image_size < 32:
        parser.error("--image_size must be >= 32")
    if args.batch_size is not None and args.batch_size < 1:
        parser.error("--batch_size must be >= 1")
    if (args.symmetric or args.use_qdq) and not args.quantize:
        parser.error("--symmetric and --use_qdq only take effect with --quantize")
    if args.use_ema_weights and not args.checkpoint:
        parser.error("--use_ema_weights needs --checkpoint")
    return args


def build_export_model(args, quantization, platform):
    """The model as exported: plain conv ops (model/kernels.py, purpose "export"); NCHW is only traced here, so
    it is built on CPU too."""
    from model import resnet
    return resnet.build_model(
        args.model_name, num_classes=args.num_classes, compute_format=args.compute_format,
        use_final_conv=args.use_final_conv, input_normalized=args.no_normalization, image_size=args.image_size,
        platform=platform, allow_nchw_on_cpu=True, purpose="export", quantization=quantization)


# This tool's flag for each RunConfig field a checkpoint records.
CHECKPOINT_FLAGS = {"arch": "--model_name", "num_classes": "--num_classes", "image_size": "--image_size",
                    "use_final_conv": "--use_final_conv"}


def resolve_settings(args, info, log=print):
    """The export's settings from the checkpoint (runtime/settings.reconcile): a flag left at its default takes the
    checkpoint's value, a given one must agree. --quantize stays a choice (a QAT checkpoint also exports as float),
    but the quantised graph takes the checkpoint's --symmetric and --use_qdq: the ranges were trained on that grid
    (FakeQuant and QuantizeAndDequantize round to different ones)."""
    given = {{"model_name": "arch"}.get(dest, dest) for dest in getattr(args, "given", ())}
    current = {"arch": args.model_name, "num_classes": args.num_classes, "image_size": args.image_size,
               "use_final_conv": args.use_final_conv, "symmetric": args.symmetric, "use_qdq": args.use_qdq}
    recorded = info.recorded_settings()
    # Only ranges trained on a grid bind the export to it: a float checkpoint's (unused) QAT flags do not.
    flags = dict(CHECKPOINT_FLAGS, **({"symmetric": "--symmetric", "use_qdq": "--use_qdq"}
                                      if args.quantize and recorded.get("quantize") else {}))
    source = f"checkpoint {info.path}"
    changes = reconcile(current, recorded, given, flags, source, log,
                        compatible=lambda name, *_: name == "use_final_conv", unrecorded=info.unrecorded_settings())
    for name, value in changes.items():
        setattr(args, {"arch": "model_name"}.get(name, name), value)
    if "use_final_conv" in given and recorded.get("use_final_conv", args.use_final_conv) != args.use_final_conv:
        log(classifier_form_note(source, recorded["use_final_conv"], args.use_final_conv))  # as main.py says it
    if info.has_quantization_ranges and not args.quantize:
        log(f"NOTE: {source} holds quantisation ranges (QAT); this is the float graph, --quantize exports the "
            "quantised one")
    return args


def export(args, log=print, written=None):
    """Builds, restores, freezes and writes the graph (`written`, a list, gets --output_file once it is on disk)."""
    from model import checkpoint, export as model_export
    from runtime import checkpoints, runner_utils
    from utils import devices
    check_output_file("--output_file", args.output_file)  # before the (slow) build and freeze
    check_tensorflow_path("--checkpoint", args.checkpoint)
    platform = devices.setup_devices()
    from model.layers.quantization import QuantizationConfig
    info = None
    if args.checkpoint:
        info = checkpoint.inspect(checkpoint.find_checkpoint(args.checkpoint, "--checkpoint", warn=log))
        if args.use_ema_weights:  # refused before any line on the checkpoint (settings taken, variables restored)
            checkpoints.require_averages(info)
        resolve_settings(args, info, log)
    quantization = QuantizationConfig.from_flags(args.quantize, args.symmetric, args.use_qdq, quantized_inference=True)
    model = build_export_model(args, quantization, platform)
    if info is not None:
        describe = (f"--model_name {args.model_name} --num_classes {args.num_classes} "
                    f"--use_final_conv {args.use_final_conv}")
        checkpoints.check_fits(info, args.model_name, args.num_classes, arch_flag="--model_name")
        log(checkpoint.restore_model(model, info, args.model_name, describe).describe())
        for warning in (checkpoint.unsettled_statistics(info.step, f"checkpoint {info.path}"),
                        checkpoint.divergence_warning(info.diverged, f"checkpoint {info.path}")):
            if warning:
                log(warning)
        if args.use_ema_weights:
            checkpoint.use_averages(model, info, args.model_name, describe, log)
        else:
            checkpoints.note_unused_averages(info, log)
        if quantization is not None and not info.has_quantization_ranges:
            log("WARNING: the checkpoint has no quantisation ranges (not QAT-trained); activation ranges keep "
                "their initial [-6, 6]")
    else:
        log("No --checkpoint: exporting random weights")
    class_names = runner_utils.class_names_for_export(os.path.dirname(info.path), args.num_classes) if info else None
    # What the graph is, for every door that serves it: quantised or not (a QAT checkpoint's float graph says its
    # ranges are unused, as a SavedModel of it does), and a quantised one whose activation ranges were never trained
    ranges = {"unused_quantization_ranges": True} if quantization is None and info is not None \
        and info.has_quantization_ranges else \
        {"untrained_quantization_ranges": True} if quantization is not None and not (
            info is not None and info.has_quantization_ranges) else {}
    source = model_export.source_record(args.model_name, args.num_classes, info, args.use_ema_weights, class_names,
                                        quantized=quantization is not None,
                                        symmetric=bool(quantization is not None and args.symmetric),
                                        use_qdq=bool(quantization is not None and args.use_qdq), **ranges)
    graph_def = model_export.frozen_graph(model, args.model_name, args.image_size, args.input_format, args.batch_size,
                                          source)
    replaced = os.path.exists(args.output_file)  # rewritten as the original did, and said
    model_export.write_graph_def(graph_def, args.output_file, args.write_text_graphdef)
    if written is not None:
        written.append(args.output_file)
    shape = [args.batch_size or -1] + ([3, args.image_size, args.image_size] if args.input_format == "NCHW"
                                       else [args.image_size, args.image_size, 3])
    log(f"Wrote {'text' if args.write_text_graphdef else 'binary'} GraphDef {args.output_file}"
        f"{', replacing the file there' if replaced else ''}: input "
        f"'input' {args.input_format} {shape}, output '{model_export.output_node_name(args.model_name)}' "
        f"[{args.batch_size or -1}, {args.num_classes}] ({args.model_name}{', fake-quantised' if quantization else ''}"
        f"); it takes "
        f"{model_export.describe_input_pixels(model_export.graph_input_pixels(graph_def))}")
    if class_names:
        log(f"It records the class names of {os.path.join(os.path.dirname(info.path), 'labels.txt')} (output k is "
            f"line k + 1){runner_utils.unnamed_outputs(class_names, args.num_classes)}, as its ONNX conversion will")
    elif info is not None:  # (without --checkpoint, "exporting random weights" was said)
        log(runner_utils.no_class_names_line(os.path.dirname(info.path), args.num_classes))
    if args.compute_format == "NCHW" and not platform.gpu:
        log("NOTE: --compute_format NCHW: this graph needs a GPU to run in TensorFlow (its CPU kernels are NHWC-only; "
            "its ONNX conversion runs on a CPU too); use --compute_format NHWC for TensorFlow on a CPU")
    return graph_def


@command
def main(argv=None):
    args = parse_args(argv)
    written = []
    # A stop, and stdout's failure at one of the lines (`| head -1`), say whether the graph was written: a closed
    # pipe otherwise ends a tool silently, status 141, and here that stop comes before the graph is.
    with on_interrupt(lambda: kept_line(args.output_file, written), closed_stdout=True):
        export(args, written=written)


def kept_line(output_file, written):
    """What an export stopped by a signal or a closed stdout has left."""
    if written:
        return f"the graph was written to {printable(output_file)}; only the lines after it are lost"
    return (f"no graph was written to {printable(output_file)}{earlier_file_kept(output_file)}; run the same "
            "command again")


if __name__ == "__main__":
    sys.exit(main())
