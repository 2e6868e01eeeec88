"""torchvision's resnet50 (the same v1.5 network) on this CPU: train fp32, train bf16 autocast, inference fp32 and
bf16 autocast, interleaved in one process; prints one JSON line. Runs in a separate venv (torch is not a
dependency of this project):

    python3 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch==2.14.1 torchvision==0.29.1
    /tmp/torchvenv/bin/python bench/torchvision_peer.py [--batch 32] [--size 224] [--warmup 2] [--rounds 5]
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time


def main(argv=None):
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0] or None, allow_abbrev=False)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--infer_batches", default="1,32")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--variants", default="train_fp32,train_bf16,infer_fp32,infer_bf16")
    args = parser.parse_args(argv)

    import torch
    import torchvision
    torch.manual_seed(0)
    load_start = os.getloadavg()
    train_model = torchvision.models.resnet50(num_classes=1001)
    infer_model = torchvision.models.resnet50(num_classes=1001).eval()
    optimizer = torch.optim.SGD(train_model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.rand(args.batch, 3, args.size, args.size) * 255
    labels = torch.randint(0, 1001, (args.batch,))

    def train(bf16):
        def step():
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = loss_fn(train_model(images), labels)
            loss.backward()
            optimizer.step()
            return loss.detach().item()
        return step

    def infer(bf16, batch):
        batch_images = images[:batch] if batch <= args.batch else torch.rand(batch, 3, args.size, args.size)

        def step():
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                return infer_model(batch_images).float().argmax(1).sum().item()
        return step

    variants, batch_of = {}, {}
    for name in args.variants.split(","):
        if name.startswith("train"):
            variants[name] = train(name.endswith("bf16"))
            batch_of[name] = args.batch
        else:
            for batch in (int(b) for b in args.infer_batches.split(",")):
                variants[f"{name}_b{batch}"] = infer(name.endswith("bf16"), batch)
                batch_of[f"{name}_b{batch}"] = batch
    for name, step in variants.items():
        for _ in range(args.warmup):
            step()
    times = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, step in variants.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    results = {name: {"s_per_step": round(statistics.median(t), 4),
                      "img_per_s": round(batch_of[name] / statistics.median(t), 2),
                      "batch": batch_of[name]} for name, t in times.items()}
    print(json.dumps({"benchmark": "torchvision_peer", "date": datetime.datetime.now().isoformat(timespec="seconds"),
                      "torch": torch.__version__, "torchvision": torchvision.__version__,
                      "threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                      "loadavg_start": [round(x, 2) for x in load_start],
                      "loadavg_end": [round(x, 2) for x in os.getloadavg()], "size": args.size,
                      "warmup": args.warmup, "rounds": args.rounds, "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
