"""Inference throughput at batch 1 and 32: our eval step, our SavedModel, our frozen graph, our ONNX model under
ONNX Runtime, against keras.applications.ResNet50 - all interleaved in one process.

    .venv/bin/python -m bench.inference [--batches 1,32] [--size 224] [--warmup 3] [--rounds 10] \
        [--variants ours,ours_cpu_conv,ours_xla,ours_amp,savedmodel,frozen,onnx,tflite,keras] [--json FILE]

Variants:
  ours        the forward of Runner.evaluate's eval_step (main.py --mode inference_benchmark), fp32, on a model
              built for inference (plain convs, model/kernels.py)
  ours_cpu_conv  ... on a model built with the CPU training kernels (matmul/patches conv formulations)
  ours_xla    ... with --xla;  ours_amp ... with --amp (mixed_bfloat16)
  savedmodel  model/export.save_saved_model (main.py --export_dir) loaded back, serving_default signature
  frozen      the frozen GraphDef of model/export.py (export_frozen_graph.py; NHWC, native convs) run by TF
  onnx        model/export.py's SavedModel of a model built for export (native convs) -> ONNX, run by ONNX
              Runtime's CPU provider
  tflite      TensorFlow Lite's converter on that SavedModel (BN folded into the convs), run by its interpreter
              (XNNPACK delegate, one thread per core)
  keras       keras.applications.ResNet50(weights=None) in a tf.function, training=False
Fresh random weights everywhere (throughput does not depend on the values).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402
from utils.errors import doc_part


def _export_model(args):
    return common.OurModel(args.arch, 1, args.size, purpose="export")


def _export_saved_model(args, workdir, name):
    """model/export.py's SavedModel of a model built for export (native convs), what the converters take."""
    from model import export
    return export.save_saved_model(_export_model(args).model, args.size, os.path.join(workdir, name))


def _tflite_runner(args, workdir):
    """TensorFlow Lite's converter on model/export.py's SavedModel (what a user converts), run by its interpreter
    (XNNPACK, one thread per core); checked once against the SavedModel's own probabilities."""
    import warnings

    import numpy as np
    import tensorflow as tf
    saved = _export_saved_model(args, workdir, "tflite_savedmodel")
    blob = tf.lite.TFLiteConverter.from_saved_model(saved).convert()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # tf.lite.Interpreter's notice that LiteRT succeeds it
        interpreter = tf.lite.Interpreter(model_content=blob, num_threads=os.cpu_count())
    serve = interpreter.get_signature_runner("serving_default")
    check = common.synthetic_batch(2, args.size)[0]
    expected = tf.saved_model.load(saved).signatures["serving_default"](input=check)["probabilities"].numpy()
    difference = float(np.abs(serve(input=check.numpy())["probabilities"] - expected).max())
    if not difference <= 1e-4:
        raise SystemExit(f"tflite: the converted model's probabilities differ from the SavedModel's by {difference}")
    return lambda images, serve=serve: serve(input=images.numpy())["probabilities"]


def build_variants(names, args, workdir, log):
    import numpy as np
    import tensorflow as tf
    from model import export
    from model.kernels import CPU_TRAINING_KERNELS
    makers = {}
    for name in names:
        log(f"building {name}")
        if name in ("ours", "ours_xla", "ours_amp", "ours_cpu_conv"):
            # ours_cpu_conv: the training step's matmul/patches formulations at inference too.
            kernels = CPU_TRAINING_KERNELS if name == "ours_cpu_conv" else None
            ours = common.OurModel(args.arch, 1, args.size, xla=name == "ours_xla", amp=name == "ours_amp",
                                   purpose="inference", kernels=kernels)
            step = common.our_eval_step(ours)
            makers[name] = lambda images, step=step: step(images).numpy()
        elif name == "savedmodel":
            ours = common.OurModel(args.arch, 1, args.size, purpose="inference")
            path = export.save_saved_model(ours.model, args.size, os.path.join(workdir, "savedmodel"))
            serve = tf.saved_model.load(path).signatures["serving_default"]
            makers[name] = lambda images, serve=serve: serve(input=images)["probabilities"].numpy()
        elif name == "frozen":
            from model.export import freeze, probabilities_function
            ours = _export_model(args)
            function = probabilities_function(ours.model, args.arch, args.size, "NHWC")
            graph_def = freeze(function.get_concrete_function(), "output")

            def _import():
                tf.compat.v1.import_graph_def(graph_def, name="")
            wrapped = tf.compat.v1.wrap_function(_import, [])
            pruned = wrapped.prune(wrapped.graph.get_tensor_by_name("input:0"),
                                   wrapped.graph.get_tensor_by_name("output:0"))
            makers[name] = lambda images, pruned=pruned: pruned(images).numpy()
        elif name == "onnx":
            import onnxruntime
            from model.export import saved_model_to_onnx
            saved = _export_saved_model(args, workdir, "onnx_savedmodel")
            onnx_path = os.path.join(workdir, "model.onnx")
            saved_model_to_onnx(saved, onnx_path)
            options = onnxruntime.SessionOptions()
            # ORT's pool spins for a while after each run by default: in interleaved rounds that takes the cores
            # from whichever variant runs next (the eval step after `onnx` measured 88-102 ms against the
            # SavedModel's 60-82 at b1, and 60 ms alone). Off, every variant gets idle cores.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session = onnxruntime.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
            makers[name] = lambda images, session=session: session.run(["probabilities"],
                                                                       {"input": images.numpy()})[0]
        elif name == "tflite":
            makers[name] = _tflite_runner(args, workdir)
        elif name == "keras":
            model = common.keras_resnet50(1001, args.size)

            @tf.function
            def keras_step(images, model=model):
                return model(images, training=False)
            makers[name] = lambda images, step=keras_step: step(images).numpy()
        else:
            raise SystemExit(f"unknown variant {name}")
    del np
    return makers


def main(argv=None):
    parser = argparse.ArgumentParser(description=doc_part(__doc__, separator="\n"), allow_abbrev=False)
    parser.add_argument("--variants", default="ours,savedmodel,frozen,onnx,keras")
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    info = common.machine_info()
    log = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    with tempfile.TemporaryDirectory() as workdir:
        makers = build_variants(args.variants.split(","), args, workdir, log)
        batches = [int(b) for b in args.batches.split(",")]
        variants = {}
        for batch in batches:
            images = common.synthetic_batch(batch, args.size)[0]
            for name, run in makers.items():
                variants[f"{name}_b{batch}"] = lambda run=run, images=images: run(images)
        faults = {}
        times = common.interleaved(variants, args.rounds, args.warmup, log=log, faults=faults)
    forward_gflop = common.forward_gflop(args.arch, args.size)
    results = {}
    for batch in batches:
        base = times.get(f"keras_b{batch}")
        for name in makers:
            key = f"{name}_b{batch}"
            seconds = common.median(times[key])
            row = {"batch": batch, "ms_per_batch": round(seconds * 1e3, 1), "img_per_s": round(batch / seconds, 2),
                   "page_faults_per_batch": round(common.median(faults[key]))}
            if base:
                row["speedup_vs_keras"] = round(common.median(base) / seconds, 3)
            row["model_gflop_per_s"] = round(forward_gflop * batch / seconds, 1)
            results[key] = row
    common.report(args.json, {"benchmark": "inference", "arch": args.arch, "size": args.size,
                              "warmup": args.warmup, "rounds": args.rounds, "machine": info, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
