"""SavedModel or frozen GraphDef -> ONNX (tf2onnx), for ONNX Runtime and TensorRT.

    python export_onnx.py --input EXPORT_DIR/1700000000 --output model.onnx     # SavedModel (serving_default)
    python export_onnx.py --input rn50_qat.pb --output rn50_qat.onnx            # export_frozen_graph.py output

A SavedModel's `serving_default` signature is frozen first; its ONNX graph has input `input` and outputs
`classes` and `probabilities`. A frozen GraphDef keeps its `input` placeholder and single softmax output. QAT graphs
keep their quantisation as QuantizeLinear/DequantizeLinear pairs (what TensorRT's explicit INT8 mode consumes).
tf2onnx cannot convert FakeQuant ops with a narrow range (symmetric FakeQuant weights): export those graphs with
--use_qdq.
"""
import argparse
import os
import sys

from utils import quiet
from utils.errors import UserError, command

DEFAULT_OPSET = 17


def _load_graph_def(path):
    import tensorflow as tf
    graph_def = tf.compat.v1.GraphDef()
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        graph_def.ParseFromString(data)
    except Exception:  # noqa: BLE001 - protobuf raises DecodeError; fall back to the text format
        from google.protobuf import text_format
        try:
            text_format.Parse(data.decode("utf-8"), graph_def)
        except Exception as error:  # noqa: BLE001
            raise UserError(f"{path} is not a GraphDef (binary or text): {str(error)[:200]}") from None
    return graph_def


def graph_def_io(graph_def):
    """(input names, output names) of a frozen graph: placeholders, and nodes no other node consumes."""
    consumed = {name.split(":")[0].lstrip("^") for node in graph_def.node for name in node.input}
    inputs = [node.name for node in graph_def.node if node.op == "Placeholder"]
    outputs = [node.name for node in graph_def.node if node.name not in consumed and node.op not in ("Const", "NoOp")
               and node.op != "Placeholder"]
    return inputs, outputs


def load_serving_signature(saved_model_dir):
    """The `serving_default` concrete function of a SavedModel; UserError if absent or unreadable."""
    import tensorflow as tf
    if not os.path.isdir(saved_model_dir) or not tf.saved_model.contains_saved_model(saved_model_dir):
        raise UserError(f"{saved_model_dir} is not a SavedModel directory (expected saved_model.pb inside; "
                        "pass the timestamped subdirectory of --export_dir)")
    loaded = tf.saved_model.load(saved_model_dir)
    signature = loaded.signatures.get("serving_default")
    if signature is None:
        raise UserError(f"SavedModel {saved_model_dir} has no serving_default signature "
                        f"(signatures: {', '.join(loaded.signatures) or 'none'})")
    return loaded, signature


def saved_model_to_onnx(saved_model_dir, output_path, opset=DEFAULT_OPSET):
    import tf2onnx
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
    _, signature = load_serving_signature(saved_model_dir)
    frozen = convert_variables_to_constants_v2(signature)
    input_names = [tensor.name for tensor in frozen.inputs]
    output_names = [tensor.name for tensor in frozen.outputs]
    # Name the ONNX outputs after the signature keys (classes, probabilities).
    keys = sorted(signature.structured_outputs)  # the flattening order of a dict of outputs
    by_tensor = {tensor.name: key for key, tensor in zip(keys, frozen.outputs)}
    model_proto, _ = tf2onnx.convert.from_graph_def(
        frozen.graph.as_graph_def(), input_names=input_names, output_names=output_names, opset=opset)
    _rename_io(model_proto, input_names, ["input"], output_names,
               [by_tensor.get(name, name.split(":")[0]) for name in output_names])
    _save(model_proto, output_path)
    return model_proto


def _rename_io(model_proto, old_inputs, new_inputs, old_outputs, new_outputs):
    renames = dict(zip(old_inputs, new_inputs))
    renames.update(zip(old_outputs, new_outputs))
    graph = model_proto.graph
    for value in list(graph.input) + list(graph.output):
        if value.name in renames:
            value.name = renames[value.name]
    for node in graph.node:
        for index, name in enumerate(node.input):
            if name in renames:
                node.input[index] = renames[name]
        for index, name in enumerate(node.output):
            if name in renames:
                node.output[index] = renames[name]


def frozen_graph_to_onnx(graph_def_path, output_path, opset=DEFAULT_OPSET):
    import tf2onnx
    graph_def = _load_graph_def(graph_def_path)
    inputs, outputs = graph_def_io(graph_def)
    if len(inputs) != 1 or len(outputs) != 1:
        raise UserError(f"{graph_def_path}: expected one placeholder and one output, got {inputs} -> {outputs}")
    input_names, output_names = [inputs[0] + ":0"], [outputs[0] + ":0"]
    try:
        model_proto, _ = tf2onnx.convert.from_graph_def(graph_def, input_names=input_names,
                                                        output_names=output_names, opset=opset)
    except Exception as error:  # noqa: BLE001 - tf2onnx raises plain exceptions for unsupported ops
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if "narrow_range" in message:
            message += " (symmetric FakeQuant weights: export the frozen graph with --use_qdq)"
        raise UserError(f"tf2onnx cannot convert {graph_def_path}: {message[:300]}") from None
    _rename_io(model_proto, input_names, ["input"], output_names, ["probabilities"])
    _save(model_proto, output_path)
    return model_proto


def _save(model_proto, output_path):
    import onnx
    if output_path:
        directory = os.path.dirname(os.path.abspath(output_path))
        os.makedirs(directory, exist_ok=True)
        onnx.save(model_proto, output_path)


def convert(input_path, output_path, opset=DEFAULT_OPSET):
    if not os.path.exists(input_path):
        raise UserError(f"--input {input_path} does not exist")
    if os.path.isdir(input_path):
        return saved_model_to_onnx(input_path, output_path, opset)
    return frozen_graph_to_onnx(input_path, output_path, opset)


@command
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--input", required=True, help="SavedModel directory or frozen GraphDef (.pb/.pbtxt)")
    parser.add_argument("--output", required=True, help="ONNX file to write")
    parser.add_argument("--opset", type=int, default=DEFAULT_OPSET)
    quiet.add_verbose_flag(parser)
    args = parser.parse_args(argv)
    model_proto = convert(args.input, args.output, args.opset)
    quantize_nodes = sum(node.op_type == "QuantizeLinear" for node in model_proto.graph.node)
    print(f"Wrote {args.output} (opset {args.opset}, {len(model_proto.graph.node)} nodes, "
          f"{quantize_nodes} QuantizeLinear)")


if __name__ == "__main__":
    sys.exit(main())
