"""QAT accuracy on the embedded Fashion-MNIST subset: FP32 training, QAT fine-tuning, quantised eval graph.

    python -m bench.qat_accuracy --work_dir /tmp/qat_bench [--fp32_epochs 3] [--qat_epochs 1]

The original's workflow end to end (SPEC §4.9): main.py trains an FP32 ResNet-50 (32 px, 10 classes); main.py
--quantize --symmetric --use_qdq --finetune_checkpoint fine-tunes it with QAT; postprocess_ckpt.py turns the
classifier into a 1x1 conv; export_frozen_graph.py --quantize --use_final_conv --use_qdq --symmetric writes the
quantised eval graph, which is run over the validation set here. Prints the FP32 accuracy, the QAT model's float
accuracy (main.py's evaluation) and the quantised frozen graph's accuracy.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMON = ["--arch", "resnet50", "--num_classes", "10", "--image_size", "32", "--weight_init", "fan_in",
          "--batch_size", "32", "--iter_unit", "epoch", "--no_progress"]


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
    import tensorflow as tf
    from runtime import runner_utils
    from utils import data_utils
    graph_def = tf.compat.v1.GraphDef()
    with open(graph_path, "rb") as handle:
        graph_def.ParseFromString(handle.read())
    probabilities = tf.compat.v1.wrap_function(
        lambda x: tf.graph_util.import_graph_def(graph_def, input_map={"input:0": x},
                                                 return_elements=["resnet50/output/softmax:0"])[0],
        [tf.TensorSpec([None, 32, 32, 3], tf.float32)])
    filenames = runner_utils.list_filenames_in_dataset(data_dir, "validation")
    total = sum(runner_utils.count_records(name) for name in filenames)
    dataset = data_utils.get_tfrecords_input_fn(filenames, batch_size, 32, 32, training=False, num_threads=2,
                                                deterministic=True, num_classes=10)
    correct = seen = 0
    for images, labels in dataset.take(total // batch_size):
        predicted = np.argmax(probabilities(images).numpy(), axis=1)
        correct += int(np.sum(predicted == labels.numpy()))
        seen += len(predicted)
    return correct / seen


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", required=True)
    parser.add_argument("--fp32_epochs", type=int, default=3)
    parser.add_argument("--qat_epochs", type=int, default=1)
    parser.add_argument("--qat_lr", type=float, default=0.002)
    args = parser.parse_args(argv)
    data = os.path.join(args.work_dir, "data")
    fp32, qat = os.path.join(args.work_dir, "fp32"), os.path.join(args.work_dir, "qat")
    if not os.path.exists(os.path.join(data, "labels.txt")):
        run(["-m", "dataprep.fashion_mnist", "--out", data, "--image_size", "32"])
    if not os.path.exists(os.path.join(fp32, "checkpoint")):
        run(["main.py", "--mode", "train_and_evaluate", *COMMON, "--data_dir", data, "--results_dir", fp32,
             "--num_iter", str(args.fp32_epochs), "--lr_init", "0.1", "--lr_warmup_epochs", "1"])
    if not os.path.exists(os.path.join(qat, "checkpoint")):
        run(["main.py", "--mode", "train_and_evaluate", *COMMON, "--data_dir", data, "--results_dir", qat,
             "--num_iter", str(args.qat_epochs), "--lr_init", str(args.qat_lr), "--lr_warmup_epochs", "0",
             "--quantize", "--symmetric", "--use_qdq", "--finetune_checkpoint", fp32])
    final_conv = os.path.join(args.work_dir, "qat_final_conv")
    run(["postprocess_ckpt.py", "--input", qat, "--output", final_conv, "--overwrite"])
    graph = os.path.join(args.work_dir, "qat_eval.pb")
    run(["export_frozen_graph.py", "--model_name", "resnet50", "--num_classes", "10", "--image_size", "32",
         "--input_format", "NHWC", "--compute_format", "NHWC", "--checkpoint", final_conv, "--output_file", graph,
         "--quantize", "--use_final_conv", "--use_qdq", "--symmetric"])
    results = {
        "fp32_top1": final_top1(os.path.join(fp32, "log.json")),
        "qat_float_eval_top1": final_top1(os.path.join(qat, "log.json")),
        "qat_quantized_graph_top1": frozen_graph_accuracy(graph, data),
    }
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
