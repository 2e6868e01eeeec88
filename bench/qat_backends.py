"""A quantisation-aware frozen graph in TensorFlow against its ONNX conversion in ONNX Runtime, over a validation
split: how often the two give another top class, how far their probabilities differ, and their accuracies.

    python -m bench.qat_backends --graph qat.pb --data_dir DIR [--json out.json]

The graph is export_frozen_graph.py --quantize's; it is converted here as export_onnx.py does, and both backends
are fed what the graph records it takes (NCHW or NHWC, raw or normalised pixels: bench.common.FrozenGraph).
ONNX Runtime runs twice: with its default optimisations, which turn the Q/DQ pairs around each conv into int8
kernels (QLinearConv), and with them off, where it computes the dequantised values in float as TensorFlow does.
As a yardstick, TensorFlow against itself on inputs scaled by 1 + 1e-6: how many top classes a float rounding of
the input moves in a fake-quantised model, where a value near a bin's edge lands in the neighbouring bin.
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

from utils.errors import command, doc_part


def compare(first, second):
    """{top-1 agreement, |p1 - p2| max / median / p99 per image} of two [N, K] probability arrays."""
    difference = np.abs(first - second).max(axis=1)
    return {"top1_agreement": float(np.mean(first.argmax(1) == second.argmax(1))),
            "max_abs_diff": float(difference.max()), "median_abs_diff": float(np.median(difference)),
            "p99_abs_diff": float(np.quantile(difference, 0.99))}


def probabilities(graph_path, data_dir, batch_size):
    """(the graph as bench.common.FrozenGraph, {backend: [N, K] probabilities}, labels [N]) over the validation
    split of `data_dir`: every backend is fed the images as the graph records it takes them (layout, pixels)."""
    import onnxruntime as ort
    from bench.common import FrozenGraph
    from model import export

    graph = FrozenGraph(graph_path)
    with tempfile.TemporaryDirectory() as work:
        onnx_path = os.path.join(work, "qat.onnx")
        export.to_onnx(graph_path, onnx_path)
        sessions = {}
        for name, level in (("ort", ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
                            ("ort_unoptimised", ort.GraphOptimizationLevel.ORT_DISABLE_ALL)):
            options = ort.SessionOptions()
            options.graph_optimization_level = level
            sessions[name] = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
    outputs = {name: [] for name in ("tf", "tf_scaled", *sessions)}
    labels = []
    for fed, batch_labels in graph.validation_batches(data_dir, batch_size):
        outputs["tf"].append(graph(fed))
        outputs["tf_scaled"].append(graph(fed * np.float32(1 + 1e-6)))
        for name, session in sessions.items():
            outputs[name].append(session.run(None, {session.get_inputs()[0].name: fed})[0])
        labels.append(batch_labels)
    return graph, {name: np.concatenate(values) for name, values in outputs.items()}, np.concatenate(labels)


@command
def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.qat_backends", description=doc_part(__doc__, separator="\n"))
    parser.add_argument("--graph", required=True, help="a frozen graph of export_frozen_graph.py --quantize")
    parser.add_argument("--data_dir", required=True, help="TFRecords with validation-* shards")
    parser.add_argument("--batch_size", type=int, default=100)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    graph, outputs, labels = probabilities(args.graph, args.data_dir, args.batch_size)
    source = graph.source
    # File names only: a result kept in bench/results/ names no path of the machine it was measured on.
    recorded = dict(source, checkpoint=os.path.basename(source["checkpoint"])) if source.get("checkpoint") else source
    results = {"graph": os.path.basename(args.graph), "source": recorded, "images": int(len(labels)),
               "top1": {name: float(np.mean(values.argmax(1) == labels)) for name, values in outputs.items()},
               "tf_vs_ort": compare(outputs["tf"], outputs["ort"]),
               "tf_vs_ort_unoptimised": compare(outputs["tf"], outputs["ort_unoptimised"]),
               "tf_vs_tf_input_scaled_1e-6": compare(outputs["tf"], outputs["tf_scaled"])}
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
