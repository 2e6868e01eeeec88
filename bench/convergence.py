"""Acceptance run: ResNet-50 learns real data. Trains on Fashion-MNIST at 40x40 on CPU with the original's recipe
shape (cosine LR, warmup, label smoothing 0.1, momentum 0.875, fan_in init) and checks top-1 on the held-out split.

    python -m bench.convergence [--source /usr/share/datasets/fashion-mnist] [--image_size 40] [--epochs 4]
                                [--lr_init 0.1] [--min_crop_area 0.25] [--out results/convergence]

The defaults reached 86.3% top-1 in 65 min on 2 idle vCPUs (docs/BENCHMARKS.md). At 32 px the network underfits
(stage 4 runs at 1x1): 77-80% in 4- and 5-epoch runs.

--lr_init is the LR per 256 images (scaled by batch/256 as in the original). The ImageNet recipes' 0.256 with only
one warmup epoch collapsed here (batch 128, peak LR 0.128: the loss went to ln(10), uniform predictions, by step
500), hence 0.1 by default.

--min_crop_area is main.py's: the smallest area fraction a training crop keeps. The original's ImageNet crop keeps
5-100% of the image; on 28 px garments a 5% crop is a few pixels blown up to the input size. 0.25 here (it made
no measurable difference at 32 px, and every 40 px run used it: docs/BENCHMARKS.md has the runs).

--source: the full dataset (Debian package `dataset-fashion-mnist`: `apt-get install dataset-fashion-mnist`);
without it the shipped 9,000/2,000 subset is used. Prints the accuracy, the time, and PASS/FAIL against --target.
"""

import argparse
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEBIAN_SOURCE = "/usr/share/datasets/fashion-mnist"


def run(command):
    print("+", " ".join(command), flush=True)
    subprocess.run(command, cwd=ROOT, check=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--source", default=DEBIAN_SOURCE if os.path.isdir(DEBIAN_SOURCE) else None)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--image_size", type=int, default=40)
    parser.add_argument("--lr_init", type=float, default=0.1)
    parser.add_argument("--min_crop_area", type=float, default=0.25)
    parser.add_argument("--target", type=float, default=0.85)
    parser.add_argument("--out", default=os.path.join(ROOT, "results", "convergence"))
    args = parser.parse_args(argv)

    from utils.logger import read_log

    shutil.rmtree(args.out, ignore_errors=True)
    data = os.path.join(args.out, "data")
    prep = [sys.executable, "-m", "dataprep.fashion_mnist", "--out", data, "--image_size", str(args.image_size),
            "--no_progress"]
    if args.source:
        prep += ["--source", args.source]
    run(prep)
    start = time.time()
    run([sys.executable, "main.py", "--mode", "train_and_evaluate", "--arch", "resnet50", "--num_classes", "10",
         "--image_size", str(args.image_size), "--data_dir", data, "--batch_size", str(args.batch_size),
         "--num_iter", str(args.epochs), "--iter_unit", "epoch", "--lr_init", str(args.lr_init),
         "--lr_warmup_epochs", "1", "--min_crop_area", str(args.min_crop_area), "--cosine_lr", "--momentum", "0.875",
         "--weight_decay", "3.0517578125e-05", "--label_smoothing", "0.1",
         "--weight_init", "fan_in", "--seed", "1", "--display_every", "50", "--no_progress",
         "--results_dir", args.out])
    elapsed = time.time() - start
    final = [r for r in read_log(os.path.join(args.out, "log.json"))
             if r["type"] == "LOG" and "top1_accuracy" in r["data"]][-1]["data"]
    top1 = final["top1_accuracy"]
    print("convergence: source={} epochs={} batch={} size={} lr_init={} min_crop_area={} top1={:.4f} top5={:.4f} "
          "time={:.0f}s -> {}"
          .format(args.source or "shipped subset", args.epochs, args.batch_size, args.image_size, args.lr_init,
                  args.min_crop_area, top1,
                  final["top5_accuracy"], elapsed, "PASS" if top1 >= args.target else "FAIL"))
    return 0 if top1 >= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
