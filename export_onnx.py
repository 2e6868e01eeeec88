"""SavedModel or frozen GraphDef -> ONNX (tf2onnx), for ONNX Runtime and TensorRT.

    python export_onnx.py --input EXPORT_DIR/1700000000 --output model.onnx     # SavedModel (serving_default)
    python export_onnx.py --input rn50_qat.pb --output rn50_qat.onnx            # export_frozen_graph.py output

A SavedModel's `serving_default` signature is frozen first; its ONNX graph has input `input` and outputs
`classes` and `probabilities`. A frozen GraphDef keeps its `input` placeholder; its single softmax output
(`<arch>/output/softmax`) is named `probabilities` in the ONNX graph, as the SavedModel's. QAT graphs
keep their quantisation as QuantizeLinear/DequantizeLinear pairs (what TensorRT's explicit INT8 mode consumes).
tf2onnx cannot convert FakeQuant ops with a narrow range (symmetric FakeQuant weights): export those graphs with
--use_qdq. The conversion itself is model/export.py's.
"""
import os
import sys

from model import export
from utils import quiet
from utils.errors import ArgumentParser, command, doc_part
from utils.output_paths import check_output_file, check_tensorflow_path


@command
def main(argv=None):
    parser = ArgumentParser(description=doc_part(__doc__, 0, "\n"), allow_abbrev=False)
    parser.add_argument("--input", required=True, help="SavedModel directory or frozen GraphDef (.pb/.pbtxt)")
    parser.add_argument("--output", required=True, help="ONNX file to write")
    parser.add_argument("--opset", type=int, default=export.DEFAULT_OPSET)
    quiet.add_verbose_flag(parser)
    args = parser.parse_args(argv)
    check_output_file("--output", args.output)  # before the (slow) conversion
    if os.path.isdir(args.input):  # a SavedModel: TensorFlow loads its variables (a graph file is read by us)
        check_tensorflow_path("--input", args.input)
    replaced = os.path.exists(args.output)  # rewritten, and said
    model_proto = export.to_onnx(args.input, args.output, args.opset)
    quantize_nodes = sum(node.op_type == "QuantizeLinear" for node in model_proto.graph.node)
    reduced = export.onnx_reduced_precision(model_proto)
    print(f"Wrote {args.output}{', replacing the file there' if replaced else ''} (opset {args.opset}, "
          f"{len(model_proto.graph.node)} nodes, "
          f"{quantize_nodes} QuantizeLinear{', computes in ' + ' and '.join(reduced) if reduced else ''})")
    pixels, _ = export.onnx_input_pixels(model_proto)
    print(f"Model: {export.onnx_signature(model_proto)}; input: " +
          (export.describe_input_pixels(pixels) if pixels else "not recorded, and it holds no input normalisation: "
           "likely normalised pixels (the original's frozen graph), for which inference.py needs --normalized-input"))
    if "bfloat16" in reduced:
        print("Note: ONNX Runtime has no bfloat16 kernels and will not load this model; for ONNX Runtime, export "
              "the SavedModel without --amp")
    names = (export.onnx_source(model_proto) or {}).get("class_names")
    print(f"It carries the {len(names)} class names its input records (output k is name k)" if names else
          "It records no class names (its input has none in a record that agrees with its graph): its outputs are "
          "known by their index only")


if __name__ == "__main__":
    sys.exit(main())
