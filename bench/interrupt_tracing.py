"""What a SIGTERM does that arrives while TensorFlow traces a function or loads a SavedModel, with the command
wrapper's two ways of raising the interrupt: at once, wherever the signal finds the main thread (as Python does for
Ctrl-C), and only in our own code, outside tracing (what every tool uses, utils/errors.InterruptHandlers).

    .venv/bin/python -m bench.interrupt_tracing [--scenario trace|load] [--trials 40] [--arch resnet50] [--size 32]
        [--seed 0] [--json out.json]

Each trial runs TensorFlow's call anew (`trace`: a fresh `tf.function` of the inference model's forward pass;
`load`: `tf.saved_model.load` of that model, written once) and a timer thread sends SIGTERM at a uniformly random
moment of it. Each variant runs in its own process (`--variant`; an interrupt raised at once can leave TensorFlow's
state broken, e.g. its default-graph stack, for every later trial in that process). A trial ends as one of: `raised
in library code` (a frame of anything but this repository between the trial and where it was raised), `raised
outside it`, or `<Exception>: ...` (anything but the interrupt: TensorFlow's C++ did not cope with an exception
raised inside one of its callbacks into Python). Such damage can also abort the whole process (`free(): invalid
next size`); the lines printed so far are then the result. Not a timing: a count, for
docs/RELIABILITY.md#interrupts.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from utils.errors import doc_part  # noqa: E402
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

VARIANTS = ("at_once", "ours")
INSIDE, OUTSIDE = "raised in library code", "raised outside it"


def _frames_raised_through(exception, handlers_file):
    """The frames of `exception`'s traceback from where it was caught, without the signal handler's own."""
    frames, tb = [], exception.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename != handlers_file:
            frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def trial(errors, call, variant, seconds, rng):
    """`call()` with a SIGTERM at a random moment of its usual duration `seconds`; the outcome as a short text."""
    timer = threading.Timer(rng.uniform(0, seconds), os.kill, (os.getpid(), signal.SIGTERM))
    with errors.InterruptHandlers(at_once=variant == "at_once"):
        try:
            timer.start()
            call()
            time.sleep(seconds + 1.0)  # the signal arrives by then
            return "no signal"
        except errors.Terminated as stop:
            # Inside: with library code (TensorFlow's, Keras', Python's, ...) between here and where it was raised.
            frames = _frames_raised_through(stop, errors.__file__)
            return OUTSIDE if all(errors._is_ours(frame) for frame in frames) else INSIDE
        except Exception as error:  # what this counts: the call failed with something else than the interrupt
            return "{}: {}".format(type(error).__name__, str(error).splitlines()[0][:100] if str(error) else "")
        finally:
            timer.join()


def main(argv=None):
    parser = argparse.ArgumentParser(description=doc_part(__doc__, separator="\n"), allow_abbrev=False)
    parser.add_argument("--scenario", choices=("trace", "load"), default="trace")
    parser.add_argument("--trials", type=int, default=40, help="trials per variant")
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--size", type=int, default=32, help="image size of the model")
    parser.add_argument("--seed", type=int, default=0, help="seeds the moments the signals are sent")
    parser.add_argument("--variant", choices=VARIANTS, default=None,
                        help="run this variant's trials here (default: each variant in a process of its own)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.variant is None:
        return _run_each_variant(args)

    import tensorflow as tf
    tf.debugging.disable_traceback_filtering()  # `trial` tells inside from after by the traceback's frames
    try:
        with tempfile.TemporaryDirectory() as scratch:
            return _run(tf, args, scratch)
    finally:
        tf.debugging.enable_traceback_filtering()


def _run_each_variant(args):
    """Runs every variant in a child process (this module with --variant); prints and writes their counts."""
    import subprocess
    from bench import common
    options = ["--scenario", args.scenario, "--trials", str(args.trials), "--arch", args.arch, "--size",
               str(args.size), "--seed", str(args.seed)]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    outcomes, seconds = {}, {}
    with tempfile.TemporaryDirectory() as scratch:
        for variant in VARIANTS:
            path = os.path.join(scratch, variant + ".json")
            subprocess.run([sys.executable, "-m", "bench.interrupt_tracing", *options, "--variant", variant,
                            "--json", path], check=True, cwd=root)
            with open(path) as handle:
                result = json.load(handle)
            outcomes[variant], seconds[variant] = result["outcomes"][variant], result.get("seconds")
    for variant in VARIANTS:
        print(variant, json.dumps(outcomes[variant], sort_keys=True), flush=True)
    common.write_json(args.json, dict(result, outcomes=outcomes, seconds=seconds))
    return 0


def _run(tf, args, scratch):
    from bench import common
    from model import resnet
    from utils import errors
    model = resnet.build_model(args.arch, num_classes=11, image_size=args.size, weight_init="fan_in", seed=1)
    spec = tf.TensorSpec([None, args.size, args.size, 3], tf.float32)

    def forward():
        return tf.function(lambda x: model(x, training=False), input_signature=[spec])

    if args.scenario == "trace":
        def call():
            forward().get_concrete_function()
    else:
        module = tf.Module()
        module.model, module.serve = model, forward()
        path = os.path.join(scratch, "savedmodel")
        tf.saved_model.save(module, path)

        def call():
            tf.saved_model.load(path)
    start = time.perf_counter()
    call()
    seconds = time.perf_counter() - start
    print("{} of {} at {} px takes {:.2f} s; signals at uniform moments of it".format(
        args.scenario, args.arch, args.size, seconds), flush=True)
    rng = random.Random(args.seed)
    outcomes = {args.variant: {}}
    for index in range(args.trials):
        outcome = trial(errors, call, args.variant, seconds, rng)
        outcomes[args.variant][outcome] = outcomes[args.variant].get(outcome, 0) + 1
        print("{:3d} {:8s} {}".format(index, args.variant, outcome), flush=True)
    common.write_json(args.json, {"scenario": args.scenario, "arch": args.arch, "size": args.size,
                                  "trials": args.trials, "seed": args.seed, "seconds": round(seconds, 3),
                                  "outcomes": outcomes})
    return 0


if __name__ == "__main__":
    sys.exit(main())
