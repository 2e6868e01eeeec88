"""QAT accuracy on Fashion-MNIST: FP32 model -> QAT fine-tuning -> quantised eval graph, all on one eval path.

    python -m bench.qat_accuracy --work_dir /tmp/qat_bench [--fp32_epochs 3] [--qat_iter 1 --qat_iter_unit epoch]
    python -m bench.qat_accuracy --work_dir /tmp/qat_bench --data DIR --fp32_dir DIR   # reuse a converged FP32 run

The original's workflow end to end (docs/ORIGINAL.md#quantisation-aware-training): main.py trains an FP32
ResNet-50 (32 px, 10 classes) - or
--fp32_dir names one already trained, e.g. the results of `python -m bench.convergence` with --data its data dir;
main.py --quantize --symmetric --use_qdq --finetune_checkpoint fine-tunes it with QAT (the original's
GPU1_RN50_QAT.sh recipe: lr_init 5e-5, label smoothing 0.1, momentum 0.875; length and batch are options);
postprocess_ckpt.py turns the classifier into a 1x1 conv; export_frozen_graph.py --quantize --use_final_conv
--use_qdq --symmetric writes the quantised eval graph. The FP32 checkpoint is exported the same way without
--quantize, and both frozen graphs are evaluated here over the whole validation split with the same preprocessing,
so the two accuracies differ only by the model. Prints JSON with both (plus main.py's own float evaluations) and
the difference in points.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from utils.errors import command, doc_part

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMON = ["--arch", "resnet50", "--num_classes", "10", "--weight_init", "fan_in", "--no_progress", "--seed", "1"]


def run(args):
    print("+", " ".join(args), flush=True)
    subprocess.run([sys.executable, *args], cwd=ROOT, check=True)


def final_top1(log_path):
    top1 = None
    with open(log_path, encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("DLLL "):
                record = json.loads(line[5:])
                if record.get("type") == "LOG" and "top1_accuracy" in record.get("data", {}):
                    top1 = record["data"]["top1_accuracy"]
    return top1


def frozen_graph_accuracy(graph_path, data_dir, batch_size=100):
    """Top-1 accuracy of a frozen graph over the validation split of `data_dir`, fed as the graph records it takes
    its input (bench.common.FrozenGraph: layout, pixels, size and classes)."""
    from bench.common import FrozenGraph
    graph = FrozenGraph(graph_path)
    correct = seen = 0
    for prepared, labels in graph.validation_batches(data_dir, batch_size):
        correct += int(np.sum(np.argmax(graph(prepared), axis=1) == labels))
        seen += len(labels)
    return correct / seen


def export(checkpoint, output, image_size, quantized):
    flags = ["--quantize", "--use_final_conv", "--use_qdq", "--symmetric"] if quantized else []
    run(["export_frozen_graph.py", "--model_name", "resnet50", "--num_classes", "10", "--image_size",
         str(image_size), "--input_format", "NHWC", "--compute_format", "NHWC", "--checkpoint", checkpoint,
         "--output_file", output, *flags])


@command
def main(argv=None):
    parser = argparse.ArgumentParser(description=doc_part(__doc__, separator="\n"), allow_abbrev=False)
    parser.add_argument("--work_dir", required=True)
    parser.add_argument("--data", help="prepared Fashion-MNIST TFRecords (default: the shipped subset, prepared "
                                       "into WORK_DIR/data)")
    parser.add_argument("--fp32_dir", help="results dir of a trained FP32 run to start from (default: train one)")
    parser.add_argument("--image_size", type=int, default=32)
    parser.add_argument("--fp32_epochs", type=int, default=3)
    parser.add_argument("--qat_iter", type=int, default=1)
    parser.add_argument("--qat_iter_unit", choices=["epoch", "batch"], default="epoch")
    parser.add_argument("--qat_batch_size", type=int, default=32)
    parser.add_argument("--min_crop_area", type=float, default=0.25,
                        help="main.py's --min_crop_area for both trainings (bench.convergence's value: the QAT "
                             "fine-tune re-estimates BN statistics, so it should see the FP32 run's augmentation)")
    parser.add_argument("--qat_lr", type=float, default=0.00005, help="lr_init of the QAT fine-tune (GPU1_RN50_QAT.sh)")
    args = parser.parse_args(argv)
    size = ["--image_size", str(args.image_size)]
    crop = ["--min_crop_area", str(args.min_crop_area)]
    data = args.data or os.path.join(args.work_dir, "data")
    fp32 = args.fp32_dir or os.path.join(args.work_dir, "fp32")
    qat = os.path.join(args.work_dir, "qat")
    if not os.path.exists(os.path.join(data, "labels.txt")):
        run(["-m", "dataprep.fashion_mnist", "--out", data, *size, "--no_progress"])
    if not os.path.exists(os.path.join(fp32, "checkpoint")):
        run(["main.py", "--mode", "train_and_evaluate", *COMMON, *size, *crop, "--data_dir", data,
             "--results_dir", fp32, "--batch_size", "32", "--iter_unit", "epoch", "--num_iter", str(args.fp32_epochs),
             "--lr_init", "0.1", "--lr_warmup_epochs", "1"])
    started = time.time()
    if not os.path.exists(os.path.join(qat, "checkpoint")):
        run(["main.py", "--mode", "train_and_evaluate", *COMMON, *size, *crop, "--data_dir", data,
             "--results_dir", qat, "--batch_size", str(args.qat_batch_size), "--iter_unit", args.qat_iter_unit,
             "--num_iter", str(args.qat_iter), "--lr_init", str(args.qat_lr), "--lr_warmup_epochs", "0",
             "--momentum", "0.875", "--label_smoothing", "0.1", "--weight_decay", "3.0517578125e-05", "--quantize",
             "--symmetric", "--use_qdq", "--finetune_checkpoint", fp32])
    qat_seconds = time.time() - started
    fp32_graph = os.path.join(args.work_dir, "fp32_eval.pb")
    export(fp32, fp32_graph, args.image_size, quantized=False)
    final_conv = os.path.join(args.work_dir, "qat_final_conv")
    run(["postprocess_ckpt.py", "--input", qat, "--output", final_conv, "--overwrite"])
    qat_graph = os.path.join(args.work_dir, "qat_eval.pb")
    export(final_conv, qat_graph, args.image_size, quantized=True)
    fp32_top1 = frozen_graph_accuracy(fp32_graph, data)
    quantized_top1 = frozen_graph_accuracy(qat_graph, data)
    results = {
        "fp32_graph_top1": fp32_top1,
        "qat_quantized_graph_top1": quantized_top1,
        "difference_points": round(100 * (quantized_top1 - fp32_top1), 2),
        "fp32_main_eval_top1": final_top1(os.path.join(fp32, "log.json")),
        "qat_float_main_eval_top1": final_top1(os.path.join(qat, "log.json")),
        "qat_finetune_seconds": round(qat_seconds),
        "qat": f"{args.qat_iter} {args.qat_iter_unit}(s), batch {args.qat_batch_size}, lr_init {args.qat_lr}",
    }
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
