"""What a SIGTERM that arrives while TensorFlow traces a function does, with the command wrapper's two ways of
raising the interrupt: at once (as Python does for Ctrl-C) and waiting for the tracing to end (what every tool
uses, utils/errors.InterruptHandlers).

    .venv/bin/python -m bench.interrupt_tracing [--trials 40] [--arch resnet50] [--size 32] [--json out.json]

Each trial traces the inference model's forward pass anew (a fresh `tf.function`) and a timer thread sends SIGTERM
at a uniformly random moment of it; the variants alternate (at_once, waiting, at_once, ...). A trial ends as one of:
`raised while tracing` (TensorFlow's tracing, `func_graph_from_py_func`, was on the stack where the interrupt was
raised), `raised after tracing`, or `<Exception>: ...`
(anything but the interrupt: TensorFlow's graph building did not cope with an exception raised inside one of its
callbacks into Python). Such damage can also abort the whole process (`free(): invalid next size`), in which case
the lines printed so far are the result. Not a timing: a count, for docs/RELIABILITY.md#interrupts.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

VARIANTS = ("at_once", "waiting")


def _raised_while_tracing(exception):
    """Whether TensorFlow's tracing was on the stack where `exception` was raised (needs TensorFlow's traceback
    filtering off, which would drop its frames)."""
    frames = exception.__traceback__
    while frames is not None:
        if frames.tb_frame.f_code.co_name == "func_graph_from_py_func":
            return True
        frames = frames.tb_next
    return False


def trial(tf, errors, model, images, variant, trace_seconds, rng):
    """One traced forward pass with a SIGTERM at a random moment of it; the outcome as a short text."""
    function = tf.function(lambda x: model(x, training=False))
    timer = threading.Timer(rng.uniform(0, trace_seconds), os.kill, (os.getpid(), signal.SIGTERM))
    with errors.InterruptHandlers(wait_while_tracing=variant == "waiting"):
        try:
            timer.start()
            function.get_concrete_function(images)
            time.sleep(trace_seconds + 1.0)  # the signal arrives by then; a waiting interrupt is raised here
            return "no signal"
        except errors.Terminated as stop:
            return "raised while tracing" if _raised_while_tracing(stop) else "raised after tracing"
        except Exception as error:  # what this counts: the tracing failed with something else than the interrupt
            return "{}: {}".format(type(error).__name__, str(error).splitlines()[0][:100] if str(error) else "")
        finally:
            timer.join()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--trials", type=int, default=40, help="trials per variant")
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--size", type=int, default=32, help="image size of the traced model")
    parser.add_argument("--seed", type=int, default=0, help="seeds the moments the signals are sent")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    import tensorflow as tf
    from model import resnet
    tf.debugging.disable_traceback_filtering()  # _raised_while_tracing reads its frames
    try:
        return _run(tf, resnet, args)
    finally:
        tf.debugging.enable_traceback_filtering()


def _run(tf, resnet, args):
    from utils import errors
    model = resnet.build_model(args.arch, num_classes=11, image_size=args.size, weight_init="fan_in", seed=1)
    images = tf.zeros([4, args.size, args.size, 3])
    start = time.perf_counter()
    tf.function(lambda x: model(x, training=False)).get_concrete_function(images)
    trace_seconds = time.perf_counter() - start
    print("tracing {} at {} px takes {:.2f} s; signals at uniform moments of it".format(
        args.arch, args.size, trace_seconds), flush=True)
    rng = random.Random(args.seed)
    outcomes = {variant: {} for variant in VARIANTS}
    for index in range(args.trials):
        for variant in VARIANTS:
            outcome = trial(tf, errors, model, images, variant, trace_seconds, rng)
            outcomes[variant][outcome] = outcomes[variant].get(outcome, 0) + 1
            print("{:3d} {:8s} {}".format(index, variant, outcome), flush=True)
    for variant in VARIANTS:
        print(variant, json.dumps(outcomes[variant], sort_keys=True), flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"arch": args.arch, "size": args.size, "trials": args.trials,
                       "trace_seconds": round(trace_seconds, 3), "outcomes": outcomes}, handle, indent=1,
                      sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
