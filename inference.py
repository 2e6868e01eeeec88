"""Serving benchmark (docs/ORIGINAL.md#serving-benchmark): a SavedModel, its ONNX conversion, or a TensorRT engine.

    python inference.py --model EXPORT_DIR/1700000000 --data-dir DATA --batch-size 64          # TF SavedModel
    python inference.py --architecture resnet50 --batch-size 8 --backend onnxruntime --num-iter 100
    python inference.py --model model.onnx --backend tensorrt --amp                             # GPU + tensorrt
    python inference.py --model EXPORT_DIR/1700000000 --to-predict photos/                      # top 5 of photos

Model: --model (a SavedModel directory with a `serving_default` signature, input `input`, output
`probabilities`; for --backend onnxruntime/tensorrt also an .onnx file) or --architecture (random weights, exported
first as a SavedModel into a temporary directory, as the original; model/export.py). An ONNX model that records
that it takes normalised pixels (metadata `input_pixels`: a frozen graph exported with --no_normalization) gets the
batches normalised before they are timed; --normalized-input does the same for one that records nothing.
Data: one epoch of the validation TFRecords of --data-dir (eval preprocessing), or --num-iter batches of one fixed
random batch of pixels in 0..255 (the original fed standard-normal values, which the in-graph normalisation would
turn into near-constant images). Logs (dllogger format): per-100-step throughput with step (0, i); at the end
throughput = images / seconds over all steps after --warmup-steps (both count the model's time only), latency
avg/p90/p95/p99 in ms per batch, and with real data the accuracy (top 1) and accuracy_top5, counted as main.py's
evaluation counts them (how this differs from the original: docs/DEVIATIONS.md).
--to-predict (an image file, or a directory's image files) runs no benchmark: it prints each photo's top 5
classes through the model as `main.py --mode predict` does from a checkpoint (the same eval preprocessing and line
format, the class names the export records), reports and skips a file that cannot be used, and exits with status
1 when any was skipped.

Backends:
- tf (default): the SavedModel's serving_default. --amp: with --architecture the model is built and exported under
  Keras' mixed precision (mixed_float16 on GPU, mixed_bfloat16 on CPU); a given SavedModel runs in the precision it
  was exported in (the original's AMP graph-rewrite variable does not exist in TF 2), which is said on stdout.
- --tf-trt: TF-TRT conversion (FP16 with --amp) when this TensorFlow has TensorRT; TF 2.21 pip builds do not,
  and the tool then stops with a one-line message naming --backend onnxruntime and --backend tensorrt.
- onnxruntime: the SavedModel converted with tf2onnx (model/export.py), or a given .onnx; CUDA provider if present.
  It has no bfloat16 kernels: a model built or exported under --amp on a CPU is refused with a line saying so.
- tensorrt: an engine built from the ONNX model with the `tensorrt` Python API (FP32; FP16 with --amp; INT8 when
  the ONNX graph carries Q/DQ nodes from a QAT frozen graph); needs the tensorrt package and a GPU.
"""
import os
import sys
import tempfile
import time

import numpy as np

from model.arch_names import ARCH_NAMES
from model.export import onnx_input_layout
from utils import defaults, quiet
from utils.errors import ArgumentParser, UserError, command, doc_part, printable
from utils.output_paths import check_output_file, check_tensorflow_path

BACKENDS = ("tf", "onnxruntime", "tensorrt")
LOG_EVERY = 100
NO_TF_TRT = ("Tensorflow has not been built with TensorRT support (TF-TRT is absent from TF 2.18+ pip builds); "
             "use --backend onnxruntime, or --backend tensorrt (TensorRT engine from ONNX, needs a GPU)")


def parse_args(argv=None):
    parser = ArgumentParser(description=doc_part(__doc__, 0, "\n"), allow_abbrev=False)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", default=None, help="SavedModel directory (or .onnx for onnxruntime/tensorrt)")
    source.add_argument("--architecture", choices=ARCH_NAMES, help="build this model with random weights")
    parser.add_argument("--log-path", default="./log.json",
                        help="the DLLogger JSON log, appended to (default: ./log.json in the current directory, as "
                             "the original)")
    parser.add_argument("--tf-trt", action="store_true",
                        help="convert the SavedModel with TF-TRT first; needs a TensorFlow built with TensorRT, "
                             "which TF 2.21's pip builds are not (the tool then stops: use --backend onnxruntime "
                             "or --backend tensorrt)")
    parser.add_argument("--amp", action="store_true",
                        help="--architecture: build the model in mixed precision (bfloat16 on CPU, float16 on a "
                             "GPU); TF-TRT and TensorRT: an FP16 engine. A given SavedModel or ONNX model keeps the "
                             "precision it was exported in")
    parser.add_argument("--data-dir", default=None, help="validation TFRecords; random inputs if absent")
    parser.add_argument("--to-predict", default=None,
                        help="an image file, or a directory of them (.jpg/.jpeg/.png): print each one's top 5 "
                             "classes through --model, as main.py --mode predict does from a checkpoint (no benchmark)")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--backend", choices=BACKENDS, default="tf")
    parser.add_argument("--image-size", type=int, default=None,
                        help=f"input height = width; default: read from --model ({defaults.IMAGE_SIZE} for "
                             "--architecture)")
    parser.add_argument("--num-classes", type=int, default=defaults.NUM_CLASSES,
                        help="classes of the --architecture model")
    parser.add_argument("--num-iter", type=int, default=None,
                        help="steps on random inputs (default 60000 // batch size, as the original)")
    parser.add_argument("--warmup-steps", type=int, default=20, help="steps left out of the final statistics")
    parser.add_argument("--normalized-input", action="store_true",
                        help="feed (pixels - mean) / std per RGB channel: for an ONNX model that expects normalised "
                             "input and does not record it (the original's frozen graph, converted); a model that "
                             "records its input (metadata input_pixels) gets what it records without this flag")
    quiet.add_verbose_flag(parser)
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error("--batch-size must be >= 1")
    if args.num_iter is not None and args.num_iter < 1:
        parser.error("--num-iter must be >= 1")
    if args.warmup_steps < 0:
        parser.error("--warmup-steps must be >= 0")
    if args.image_size is not None and args.image_size < 32:
        parser.error("--image-size must be at least 32")
    if args.num_classes < 2:
        parser.error("--num-classes must be at least 2")
    if args.tf_trt and args.backend != "tf":
        parser.error("--tf-trt applies to --backend tf only")
    if args.to_predict is not None and args.data_dir is not None:
        parser.error("--to-predict and --data-dir are two inputs: give one (--to-predict predicts image files, "
                     "--data-dir benchmarks on validation TFRecords)")
    if args.to_predict is not None and args.architecture:
        parser.error("--to-predict needs a trained --model: --architecture has random weights, whose classes mean "
                     "nothing")
    if args.normalized_input and not (args.model or "").endswith(".onnx"):
        parser.error("--normalized-input applies to an ONNX --model only (a SavedModel's serving signature takes "
                     "raw pixels)")
    from runtime.config import given_options
    args.given = given_options(parser, argv)
    return args


# ------------------------------------------------------------------ model sources

def export_random_model(args, directory):
    """The SavedModel of a freshly built model (random weights), as the original's inference.py did: plain conv ops
    (what converters and engines expect), --amp's precision."""
    from model import export
    from runtime import startup
    from runtime.config import RunConfig
    config = RunConfig(arch=args.architecture, num_classes=args.num_classes, image_size=args.image_size,
                       amp=args.amp, no_progress=True)
    platform, precision = startup.set_up(config)
    model = startup.build_model(config, platform, precision, purpose="export")
    return export.save_saved_model(model, config.image_size, directory,
                                   {"arch": config.arch, "num_classes": config.num_classes, "weights": "fresh"})


def tf_trt_available():
    try:
        from tensorflow.python.compiler.tensorrt.trt_convert import _pywrap_py_utils
        return bool(_pywrap_py_utils.is_tensorrt_enabled())
    except (ImportError, AttributeError):
        return False


def convert_tf_trt(saved_model_dir, amp, directory):
    from tensorflow.python.compiler.tensorrt import trt_convert as trt
    converter = trt.TrtGraphConverterV2(input_saved_model_dir=saved_model_dir,
                                        precision_mode="FP16" if amp else "FP32")
    converter.convert()
    converter.save(directory)
    return directory


class TFRunner:
    def __init__(self, saved_model_dir):
        from model.export import load_serving_signature
        self._loaded, self.signature = load_serving_signature(saved_model_dir)
        spec = self.signature.structured_input_signature[1]
        if "input" not in spec:
            raise UserError(f"SavedModel {saved_model_dir}: serving_default has no input named `input` "
                            f"(inputs: {', '.join(spec)})")
        if "probabilities" not in self.signature.structured_outputs:
            raise UserError(f"SavedModel {saved_model_dir}: serving_default has no `probabilities` output")

    @property
    def input_size(self):
        shape = self.signature.structured_input_signature[1]["input"].shape
        return shape[1] if len(shape) == 4 and shape[1] == shape[2] else None

    @property
    def num_classes(self):
        shape = self.signature.structured_outputs["probabilities"].shape
        return shape[-1] if len(shape) == 2 else None

    @property
    def precision(self):
        from model.export import graph_precision
        return graph_precision(self.signature.graph.as_graph_def())

    def __call__(self, images):
        return self.signature(input=images)["probabilities"].numpy()


def run_devices(args, runner):
    """The devices `runner` computes on, for the PARAMETER record's environment: ONNX Runtime's first provider, the
    TensorRT engine's GPU, or TensorFlow's (its first visible GPU, else the CPU)."""
    providers = getattr(runner, "providers", None)
    if providers:
        return ["{} ({})".format("CPU" if providers[0] == "CPUExecutionProvider" else "GPU:0", providers[0])]
    if args.backend == "tensorrt":
        return ["GPU:0 (TensorRT)"]
    import tensorflow as tf
    from utils.devices import gpu_description
    gpus = tf.config.get_visible_devices("GPU")
    return [gpu_description(gpus[0])] if gpus else ["CPU"]


def cuda_device_count():
    """GPUs the CUDA 12 runtime can use; 0 when it cannot load or start (no GPU, no driver for CUDA 12)."""
    import ctypes
    try:
        runtime = ctypes.CDLL("libcudart.so.12")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    return count.value if runtime.cudaGetDeviceCount(ctypes.byref(count)) == 0 else 0


def _not_an_image_batch(onnx_path):
    return UserError(f"{onnx_path}: its input is not an image batch with 3 channels first or last")


def _load_onnx(onnx_path):
    """The ONNX model of `onnx_path`; UserError when the file is not one (another format, cut off)."""
    import onnx
    try:
        return onnx.load(onnx_path, load_external_data=False)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError, or onnx's own
        raise UserError(f"--model {onnx_path} is not an ONNX model (it does not parse as one: a cut-off copy, or "
                        "another format)") from None


class ONNXRuntimeRunner:
    def __init__(self, onnx_path):
        import onnxruntime
        available = onnxruntime.get_available_providers()
        providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
        self.cuda_note = None
        if "CUDAExecutionProvider" in providers:
            if hasattr(onnxruntime, "preload_dlls"):
                # onnxruntime-gpu opens CUDA and cuDNN by name; the GPU install has them as pip wheels
                # (requirements-gpu.txt), outside the loader's path, where preload_dlls() finds them.
                onnxruntime.preload_dlls()
            if cuda_device_count() == 0:
                # Asked first: ONNX Runtime would print a page of errors before falling back to the CPU itself.
                providers.remove("CUDAExecutionProvider")
                self.cuda_note = ("ONNX Runtime's CUDA provider is not used: the CUDA runtime sees no usable GPU "
                                  "(none, or no driver for CUDA 12): running on the CPU")
        self.session = onnxruntime.InferenceSession(onnx_path, providers=providers)
        self.providers = self.session.get_providers()
        if "CUDAExecutionProvider" in providers and "CUDAExecutionProvider" not in self.providers:
            self.cuda_note = ("ONNX Runtime's CUDA provider did not start (its CUDA 12 / cuDNN 9 libraries did not "
                              "load): running on the CPU")
        shape = self.session.get_inputs()[0].shape
        self.layout, self.input_size = onnx_input_layout(shape)
        # A fixed batch dimension (export_frozen_graph.py --batch_size N), else None.
        self.fixed_batch = shape[0] if shape and isinstance(shape[0], int) and shape[0] > 0 else None

    @property
    def num_classes(self):
        outputs = [output for output in self.session.get_outputs() if output.name == "probabilities"]
        shape = outputs[0].shape if outputs else []
        return shape[-1] if len(shape) == 2 and isinstance(shape[-1], int) else None

    def __call__(self, images):
        if self.layout == "NCHW":  # the batches are NHWC, as every input of this tool
            images = np.ascontiguousarray(images.transpose(0, 3, 1, 2))
        return self.session.run(["probabilities"], {"input": images})[0]


class TensorRTRunner:
    """TensorRT engine from an ONNX model (TensorRT 8.6/10 Python API; not exercised on the CPU-only machine)."""

    def __init__(self, onnx_path, batch_size, image_size, amp):
        try:
            import tensorrt as trt
        except ImportError:
            raise UserError("--backend tensorrt needs the `tensorrt` Python package and an NVIDIA GPU "
                            "(pip install tensorrt); use --backend onnxruntime on this machine") from None
        try:
            import pycuda.autoinit  # noqa: F401 - creates the CUDA context
            import pycuda.driver as cuda
        except Exception:  # noqa: BLE001 - ImportError, or a CUDA error without a GPU
            raise UserError("--backend tensorrt needs a CUDA GPU and pycuda; use --backend onnxruntime") from None
        logger = trt.Logger(trt.Logger.WARNING)
        builder = trt.Builder(logger)
        network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH))
        parser = trt.OnnxParser(network, logger)
        with open(onnx_path, "rb") as handle:
            if not parser.parse(handle.read()):
                errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
                raise UserError(f"TensorRT cannot parse {onnx_path}: {errors[:300]}")
        self.layout, self.input_size = onnx_input_layout(list(network.get_input(0).shape))
        if self.layout is None:
            raise _not_an_image_batch(onnx_path)
        image_size = image_size or self.input_size
        if image_size is None:
            raise UserError("cannot read the input size from --model; pass --image-size")
        config = builder.create_builder_config()
        if amp:
            config.set_flag(trt.BuilderFlag.FP16)
        if any(network.get_layer(i).type == trt.LayerType.QUANTIZE for i in range(network.num_layers)):
            config.set_flag(trt.BuilderFlag.INT8)  # explicit quantisation: scales come from the Q/DQ nodes
        profile = builder.create_optimization_profile()
        shape = ((batch_size, 3, image_size, image_size) if self.layout == "NCHW"
                 else (batch_size, image_size, image_size, 3))
        profile.set_shape("input", shape, shape, shape)
        config.add_optimization_profile(profile)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise UserError("TensorRT failed to build an engine (see the TensorRT log above)")
        self.engine = trt.Runtime(logger).deserialize_cuda_engine(serialized)
        self.context = self.engine.create_execution_context()
        self.context.set_input_shape("input", shape)
        self.cuda = cuda
        self.output_shape = tuple(self.context.get_tensor_shape("probabilities"))
        self.output = np.empty(self.output_shape, np.float32)
        self.device_input = cuda.mem_alloc(int(np.prod(shape)) * 4)
        self.device_output = cuda.mem_alloc(self.output.nbytes)
        self.context.set_tensor_address("input", int(self.device_input))
        self.context.set_tensor_address("probabilities", int(self.device_output))
        self.stream = cuda.Stream()

    def __call__(self, images):
        if self.layout == "NCHW":
            images = images.transpose(0, 3, 1, 2)
        self.cuda.memcpy_htod_async(self.device_input, np.ascontiguousarray(images, np.float32), self.stream)
        self.context.execute_async_v3(self.stream.handle)
        self.cuda.memcpy_dtoh_async(self.output, self.device_output, self.stream)
        self.stream.synchronize()
        return self.output


def describe_given_model(args, saved_model_dir, onnx_model, log, image_size=None, num_classes=None):
    """One line saying what --model is, from what its export recorded (model/export.read_source; an ONNX model
    converted from a SavedModel carries it), when it recorded it and the record agrees with the model's graph (its
    input size `image_size`, its `num_classes` outputs: export.agreeing_source). Returns (the record, or None; the
    line)."""
    from model import checkpoint, export
    if args.model is None:
        return None, None
    if onnx_model is not None:
        recorded = export.onnx_source(onnx_model, f"--model {printable(args.model, 300)}")
        source = export.agreeing_source(recorded, f"--model {args.model}'s metadata `{export.SOURCE_KEY}`",
                                        image_size, num_classes, warn=log, **export.onnx_facts(onnx_model))
    elif saved_model_dir is not None:
        recorded = export.read_source(saved_model_dir)
        graph = export.saved_model_graph(saved_model_dir) if recorded is not None else None
        source = export.agreeing_source(recorded, os.path.join(saved_model_dir, export.SOURCE_FILE), image_size,
                                        num_classes, warn=log, **(export.graph_facts(graph) if graph is not None else {}))
    else:
        recorded = source = None
    line = None
    if source is not None:
        line = f"Model: {args.model}: {export.describe_source(source)}"
        log(line)
        unsettled = checkpoint.unsettled_statistics(source.get("step"), f"--model {args.model}") \
            if (args.data_dir or args.to_predict) and source.get("checkpoint") else None
        if unsettled:  # an accuracy is measured, or classes predicted
            log(unsettled)
        diverged = checkpoint.divergence_warning(source.get("diverged"), f"--model {args.model}")
        if diverged:
            log(diverged)
        if args.data_dir:
            from runtime import runner_utils
            labels = os.path.join(args.data_dir, "labels.txt")
            difference = runner_utils.class_list_difference(runner_utils.read_class_names(labels),
                                                            source.get("class_names"))
            if difference:
                log(f"WARNING: {labels} names other classes than --model {args.model} records ({difference}): "
                    f"{runner_utils.OTHER_CLASSES_SCORED}")
    elif onnx_model is not None or saved_model_dir is not None:
        graph = "{}x{} input, {} classes".format(image_size or "?", image_size or "?", num_classes or "?")
        line = (f"Model: {args.model}: its record is refused (above): its architecture and checkpoint are unknown; "
                f"its input size and classes are read from its graph ({graph})" if recorded is not None else
                f"Model: {args.model}: it records no architecture or checkpoint (an export, or a frozen graph's "
                "conversion, of a version before 2026-12-05, or not ours); its input size and classes are read from "
                f"its graph ({graph})")
        log(line)
    return source, line


def recorded_fields(source):
    """The facts of a model's record for the PARAMETER log (its strings escaped, as printed): the class names as
    their count (all of them, 1001 for ImageNet, would swamp the line); None without a record."""
    from utils.errors import printable
    if source is None:
        return None
    fields = {key: printable(value)[:1000] if isinstance(value, str) else value
              for key, value in sorted(source.items()) if key != "class_names"}
    return fields | {"class_names": len(source.get("class_names") or [])}


def resolve_input_pixels(args, onnx_path, log, onnx_model=None):
    """The function that turns the raw 0..255 batches into what the model takes: the identity, or the input
    normalisation for a model exported with --no_normalization (or one --normalized-input says expects it)."""
    from model import export
    if onnx_path is None or args.model is None:
        return None, export.RAW  # a SavedModel: its serving signature takes raw pixels (export.save_saved_model)
    try:
        pixels, known_from = export.onnx_input_pixels(onnx_model if onnx_model is not None else _load_onnx(onnx_path))
    except UserError as error:
        raise UserError(f"--model {args.model}: {error}") from None
    if pixels is None:
        if args.normalized_input:
            pixels = export.NORMALIZED
            log(f"Input: --model {args.model} records nothing about its input; --normalized-input: fed "
                f"{export.describe_input_pixels(pixels)}")
        else:
            pixels = export.RAW
            log(f"Note: --model {args.model} does not record what input it takes and holds no input normalisation: "
                "it is fed raw 0..255 pixels; if it expects normalised ones (the original's frozen graph), pass "
                "--normalized-input")
    elif args.normalized_input and pixels != export.NORMALIZED:
        raise UserError(f"--normalized-input but --model {args.model} takes {export.describe_input_pixels(pixels)}, "
                        f"according to {known_from}: omit --normalized-input")
    elif pixels == export.NORMALIZED:
        timed = " before it is timed" if getattr(args, "to_predict", None) is None else ""  # (a benchmark)
        log(f"Input: --model {args.model} takes {export.describe_input_pixels(pixels)}, according to {known_from}: "
            f"inference.py normalises each batch{timed}")
    elif pixels != export.RAW:
        raise UserError(f"--model {args.model} records input_pixels {pixels!r}, which this version does not know")
    return input_feed(pixels), pixels


def input_feed(pixels):
    """The function that turns raw 0..255 NHWC batches into what a model whose `input_pixels` is `pixels` takes:
    the input normalisation for "normalized", None (the batches as they are) for "raw"."""
    from model import export
    if pixels != export.NORMALIZED:
        return None
    from utils.image_processing import CHANNEL_MEANS, CHANNEL_STDS
    mean, std = np.asarray(CHANNEL_MEANS, np.float32), np.asarray(CHANNEL_STDS, np.float32)
    return lambda images: (images - mean) / std


def no_bfloat16_kernels(args):
    return UserError(f"ONNX Runtime cannot run {args.model or args.architecture}: it computes in bfloat16 (built or "
                     "exported under --amp on a CPU), which ONNX Runtime has no kernels for; use a model exported "
                     "without --amp, or --backend tf")


def make_runner(args, saved_model_dir, onnx_path, workdir, log=print):
    if args.backend == "tf":
        if args.tf_trt:
            if not tf_trt_available():
                raise UserError(NO_TF_TRT)
            saved_model_dir = convert_tf_trt(saved_model_dir, args.amp, os.path.join(workdir, "tftrt-converted"))
        return TFRunner(saved_model_dir)
    if onnx_path is None:
        from model import export
        onnx_path = os.path.join(workdir, "model.onnx")
        export.to_onnx(saved_model_dir, onnx_path)
        log(f"Converted {'--model ' + args.model if args.model else 'the model'} to ONNX for --backend {args.backend} "
            f"(tf2onnx, opset {export.DEFAULT_OPSET}, in a temporary file; export_onnx.py writes one to keep)")
    if args.backend == "onnxruntime":
        try:
            runner = ONNXRuntimeRunner(onnx_path)
        except Exception as error:  # noqa: BLE001 - onnxruntime raises its own Fail/InvalidGraph types
            from model import export
            if "bfloat16" in export.onnx_reduced_precision(_load_onnx(onnx_path)):
                raise no_bfloat16_kernels(args) from None
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise UserError(f"ONNX Runtime cannot load {onnx_path}: {first[:200]}") from None
        if runner.layout is None:
            raise _not_an_image_batch(onnx_path)
        return runner
    return TensorRTRunner(onnx_path, args.batch_size, args.image_size, args.amp)


# ------------------------------------------------------------------ data

def check_dataset(args, num_classes):
    """The validation split of --data-dir complete, and its recorded labels within the model's `num_classes`
    outputs (utils/dataset_manifest.py): --num-classes for --architecture, the output width of --model."""
    from utils import dataset_manifest
    facts = dataset_manifest.read_split(args.data_dir, "validation")
    dataset_manifest.check_complete(facts)
    if args.architecture:
        dataset_manifest.check_classes(facts, num_classes, flag="--num-classes")
    elif num_classes is not None:
        dataset_manifest.check_classes(facts, num_classes, model=f"--model {args.model}")


def _checked(batches_of, classes_from):
    """The batches, with a label outside the model's classes, or records none of which can be used, turned into one
    UserError line."""
    import tensorflow as tf
    from utils import data_utils
    try:
        for images, labels in batches_of:
            yield images.numpy(), labels.numpy()
    except tf.errors.InvalidArgumentError as error:
        user_error = data_utils.input_error(error, classes_from)
        if user_error is None:
            raise
        raise user_error from None


def batches(args, num_classes=None, log=print):
    """(iterator of (images [B,S,S,3] float32 0..255, labels [B] or None), number of steps, (validation images, their
    SkippedRecords) or None for random inputs). One pass over the records, as main.py's evaluation: a record skipped
    as corrupt leaves its batch out rather than letting the stream wrap around to score images twice.
    `num_classes`: the model's outputs, the label range the records must fit (None: not known, the default
    utils/defaults.NUM_CLASSES assumed)."""
    if args.data_dir:
        from runtime import runner_utils
        from utils import data_utils
        filenames = runner_utils.list_filenames_in_dataset(args.data_dir, "validation")
        data_utils.check_tfrecord_files(filenames)
        num_samples = sum(runner_utils.count_records(name) for name in filenames)
        steps = num_samples // args.batch_size
        if steps == 0:
            raise UserError(f"--data-dir {args.data_dir} has {num_samples} validation images, fewer than "
                            f"--batch-size {args.batch_size}")
        from runtime.inputs import eval_preprocessing
        log(eval_preprocessing(args.image_size, "tf.data"))
        skipped = data_utils.SkippedRecords()
        dataset = data_utils.get_tfrecords_input_fn(filenames, args.batch_size, args.image_size, args.image_size,
                                                    training=False, num_threads=1, deterministic=True,
                                                    num_classes=num_classes or defaults.NUM_CLASSES, num_epochs=1,
                                                    skipped=skipped)
        classes_from = "--num-classes" if args.architecture else "the outputs of --model"
        return _checked(dataset.take(steps), classes_from), steps, (num_samples, skipped)
    steps = args.num_iter if args.num_iter is not None else max(1, 60000 // args.batch_size)
    images = np.random.RandomState(0).uniform(0, 255, (args.batch_size, args.image_size, args.image_size, 3))
    images = images.astype(np.float32)
    return ((images, None) for _ in range(steps)), steps, None


# ------------------------------------------------------------------ benchmark

def top_k_hits(probabilities, labels, k):
    """Whether each label is among its row's k highest probabilities: the op main.py's evaluation counts with
    (utils/losses.top_k_hits), tf.math.in_top_k, where a class tied with the k-th value is in."""
    import tensorflow as tf
    return tf.math.in_top_k(tf.constant(labels, tf.int32), tf.constant(probabilities, tf.float32), k).numpy()


def benchmark(run, data, steps, batch_size, warmup_steps, logger, records=None):
    """Runs `run` on every batch of `data` and logs the figures; `records`: (validation images, SkippedRecords) of
    the batches (a line says how many of them were scored), None for random inputs."""
    times, correct, correct5, counted, non_finite, num_outputs = [], 0, 0, 0, 0, None
    for index, (images, labels) in enumerate(data):
        start = time.perf_counter()
        probabilities = run(images)
        times.append(time.perf_counter() - start)
        num_outputs = np.shape(probabilities)[-1]
        finite = np.all(np.isfinite(probabilities), axis=-1)
        non_finite += int(np.sum(~finite))
        if labels is not None:  # (a row of NaNs counts as a miss)
            hits1, hits5 = top_k_hits(probabilities, labels, 1), top_k_hits(probabilities, labels, 5)
            correct += int(np.sum(hits1 & finite))
            correct5 += int(np.sum(hits5 & finite))
            counted += len(labels)
        if index > 0 and index % LOG_EVERY == 0:
            # The model's time over the last LOG_EVERY steps: the measure of the final throughput too (not the
            # wall time, which would add the input's).
            logger.log(step=(0, index), data={"throughput": LOG_EVERY * batch_size / sum(times[-LOG_EVERY:])})
    from runtime.metrics import NON_FINITE_CAUSES, latency_percentiles, non_finite_warning, warmup_warning
    if non_finite and counted:
        logger.print(non_finite_warning(non_finite, counted))
    elif non_finite:
        logger.print("WARNING: {:,} of the {:,} random inputs got non-finite outputs: {}".format(
            non_finite, len(times) * batch_size, NON_FINITE_CAUSES))
    measured = times[warmup_steps:] if len(times) > warmup_steps else times
    warning = warmup_warning(len(times), warmup_steps, "--warmup-steps")
    if warning:
        logger.print(warning)
    results = {"throughput": batch_size * len(measured) / max(sum(measured), 1e-9)}
    results.update(latency_percentiles(measured))
    if counted:
        results["accuracy"] = correct / counted
        results["accuracy_top5"] = correct5 / counted
        from runtime.metrics import top5_of_few_outputs_note
        note = top5_of_few_outputs_note(num_outputs, "accuracy_top5")
        if note:
            logger.print(note)
    if records is not None:
        from runtime.metrics import evaluated_images_line, require_evaluated
        num_samples, skipped = records
        require_evaluated(counted, num_samples, batch_size, skipped.count)
        logger.print(evaluated_images_line(counted, num_samples, 1, "epoch", batch_size, skipped.count,
                                           skipped.read))
    logger.log(step=(), data=results)
    return results


def predict_images(args, runner, normalize, files, source, logger, where=""):
    """--to-predict: the top 5 of every file through `runner`, printed as main.py --mode predict prints them
    (runtime/predict.predict_files), named by the class names the model records; the counts end the log. A model
    that takes batches of one size only (a fixed-batch ONNX graph, a TensorRT engine) gets the last batch padded
    with zeros, whose outputs are dropped. Returns predict's PredictCounts."""
    from runtime import predict
    class_names = (source or {}).get("class_names") or None
    if class_names:
        logger.print(printable(f"Class names: {len(class_names)}, recorded in --model {args.model}"))
    else:
        logger.print(printable(f"Class names: none (--model {args.model} records none): the classes are shown by "
                               "their output index"))
    run = runner if normalize is None else (lambda images: runner(normalize(images)))
    if getattr(runner, "fixed_batch", None) is not None or args.backend == "tensorrt":
        run = _padded(run, args.batch_size)
    total = len(files) + len(files.skipped)
    logger.print(f"Predicting {total} file{'' if total == 1 else 's'} in batches of {args.batch_size} with backend "
                 f"{args.backend}{where}")
    # (the counts end the log only: the run's last line says them on the terminal, as main.py --mode predict ends)
    return predict.predict_files(run, files, args.image_size, args.batch_size, class_names,
                                 log=lambda data: logger.log(step=(), data=data, echo=False))


def _padded(run, batch_size):
    """`run` for a model of fixed batch size: a smaller batch is padded with zero images, their outputs dropped."""
    def padded(images):
        count = len(images)
        if count == batch_size:
            return run(images)
        filler = np.zeros((batch_size - count,) + images.shape[1:], images.dtype)
        return np.asarray(run(np.concatenate([images, filler])))[:count]
    return padded


def resolve_image_size(args, model_size, log):
    """--image-size from the model's input signature when not given; a given one must agree with it."""
    if model_size is None:
        if args.image_size is None:
            raise UserError("cannot read the input size from --model; pass --image-size")
        return
    if args.image_size is None:
        args.image_size = model_size
        log(f"Input size {model_size}x{model_size}, read from the model")
    elif args.image_size != model_size:
        raise UserError(f"--image-size {args.image_size} but the model takes {model_size}x{model_size} inputs "
                        "(omit --image-size to use the model's)")


def resolve_num_classes(args, model_classes, log):
    """The class count of --model: a given --num-classes (which sizes --architecture's model) must agree with it."""
    if "num_classes" not in getattr(args, "given", ()):
        return
    if model_classes is None:
        log(f"Note: --num-classes {args.num_classes} is not used: it sizes the model of --architecture, and this "
            "--model does not say its class count")
    elif model_classes != args.num_classes:
        raise UserError(f"--num-classes {args.num_classes} but --model {args.model} has {model_classes} outputs "
                        "(omit --num-classes: it sizes the model of --architecture)")


def run(args):
    from utils.run_lock import RunLock
    check_output_file("--log-path", args.log_path)
    if args.model and not args.model.endswith(".onnx"):  # a SavedModel, whose variables TensorFlow loads
        check_tensorflow_path("--model", args.model)
    # The log's directory is held as main.py holds its log's (its --results_dir): a training (or another
    # inference.py) appending to the same log.json refuses this run, or is refused, rather than interleaving their
    # records; one run at a time logs into a directory, whatever its log file's name.
    with RunLock(os.path.dirname(os.path.abspath(args.log_path)), flag="--log-path",
                 subject="the directory of --log-path", remedy="give --log-path a file in another directory (one run "
                                                               "at a time logs into a directory, as into main.py's "
                                                               "--results_dir)"):
        return _run(args)


def _run(args):
    from utils import devices
    from utils.logger import DLLogger
    try:
        logger = DLLogger(args.log_path)
    except OSError as error:
        raise UserError(f"cannot write --log-path {args.log_path}: {error.strerror or error}") from None
    frozen_weights = devices.frozen_weights_parameters()
    files = None
    if args.to_predict is not None:
        from runtime.runner_utils import parse_inference_input
        files = parse_inference_input(args.to_predict, flag="--to-predict")  # before the (slow) model load
        from runtime.predict import METADATA
        for metric, meta in METADATA.items():
            logger.metadata(metric, meta)
    else:
        logger.metadata("throughput", {"unit": "images/s"})
        logger.metadata("accuracy", {"unit": None})
        logger.metadata("accuracy_top5", {"unit": None})
        for name in ("latency_avg", "latency_p90", "latency_p95", "latency_p99"):
            logger.metadata(name, {"unit": "ms"})
    try:
        with tempfile.TemporaryDirectory(prefix="inference-") as workdir:
            onnx_path = saved_model_dir = built = None
            if args.architecture:
                args.image_size = args.image_size or defaults.IMAGE_SIZE
                if args.data_dir:
                    check_dataset(args, args.num_classes)  # before the (slow) export
                if args.tf_trt and not tf_trt_available():
                    raise UserError(NO_TF_TRT)  # before the (slow) export
                saved_model_dir = export_random_model(args, os.path.join(workdir, "savedmodel"))
                built = (f"Model: --architecture {args.architecture} with freshly initialised weights, as the "
                         "original (no checkpoint: an accuracy on --data-dir is chance; serve a trained model with "
                         "--model)")
                logger.print(built)
            elif args.model.endswith(".onnx"):
                if args.backend == "tf":
                    raise UserError(f"--model {args.model} is an ONNX file: use --backend onnxruntime or tensorrt")
                if not os.path.isfile(args.model):
                    raise UserError(f"--model {args.model} does not exist")
                onnx_path = args.model
            else:
                saved_model_dir = args.model
                if os.path.isfile(saved_model_dir) and saved_model_dir.endswith(".pb"):
                    raise UserError(f"--model {saved_model_dir} is a file, a frozen graph (export_frozen_graph.py's "
                                    "output?): serve a SavedModel directory, or convert the graph with python "
                                    f"export_onnx.py --input {saved_model_dir} --output <name>.onnx and pass that with "
                                    "--backend onnxruntime")
                if not os.path.isdir(saved_model_dir):
                    from model.export import checkpoint_prefix_hint
                    raise checkpoint_prefix_hint("--model", saved_model_dir) or UserError(
                        f"--model {saved_model_dir} is not a directory (expected a SavedModel: the timestamped "
                        "subdirectory of main.py's --export_dir)")
            data_checked = bool(args.architecture)
            if saved_model_dir is not None and not args.architecture and args.backend != "tf":
                # The SavedModel's signature is checked against the flags and the data before its (slow) conversion.
                signature = TFRunner(saved_model_dir)
                if args.backend == "onnxruntime" and "bfloat16" in signature.precision:
                    raise no_bfloat16_kernels(args)  # before a conversion that would end in the same
                resolve_image_size(args, signature.input_size, logger.print)
                resolve_num_classes(args, signature.num_classes, logger.print)
                if args.data_dir:
                    check_dataset(args, signature.num_classes)
                    data_checked = True
                del signature
            runner = make_runner(args, saved_model_dir, onnx_path, workdir, logger.print)
            if isinstance(runner, TFRunner) and args.model:
                precision = runner.precision
                if args.amp or precision != "float32":
                    logger.print(f"The SavedModel computes in {precision}, the precision it was exported in" +
                                 (" (--amp does not change a given SavedModel)" if args.amp else ""))
            elif args.amp and args.model and args.backend == "onnxruntime":
                logger.print(f"Note: --amp is not used: --backend onnxruntime runs --model {args.model} in the "
                             "precision it was exported in")
            if getattr(runner, "cuda_note", None):
                logger.print(runner.cuda_note)
            resolve_image_size(args, getattr(runner, "input_size", None), logger.print)
            fixed_batch = getattr(runner, "fixed_batch", None)
            if fixed_batch is not None and fixed_batch != args.batch_size and "batch_size" not in getattr(
                    args, "given", ()):
                args.batch_size = fixed_batch
                logger.print(f"Batch size {fixed_batch}, read from the model (it takes batches of {fixed_batch} only)")
            if fixed_batch is not None and fixed_batch != args.batch_size:
                raise UserError(f"--batch-size {args.batch_size} but --model {args.model} takes batches of "
                                f"{fixed_batch} only (exported with a fixed batch size): pass --batch-size "
                                f"{fixed_batch}, or export with a dynamic batch")
            if files is not None:
                unused = [flag for flag in ("num_iter", "warmup_steps") if flag in getattr(args, "given", ())]
                if unused:
                    logger.print("Note: {} {} not used: --to-predict predicts each file once, untimed".format(
                        " and ".join("--" + flag.replace("_", "-") for flag in unused),
                        "is" if len(unused) == 1 else "are"))
                if os.path.isfile(args.to_predict):  # a single unusable file is an error, as in main.py
                    from runtime import predict
                    predict.check_image(files[0], args.image_size)
            elif args.data_dir and "num_iter" in getattr(args, "given", ()):
                logger.print(f"Note: --num-iter {args.num_iter} is not used: with --data-dir the run is one pass "
                             "over the validation images")
            num_classes = args.num_classes if args.architecture else getattr(runner, "num_classes", None)
            if not args.architecture and not (saved_model_dir is not None and args.backend != "tf"):
                resolve_num_classes(args, num_classes, logger.print)
            if args.data_dir and not data_checked:
                check_dataset(args, num_classes)
            onnx_model = _load_onnx(onnx_path) if onnx_path is not None and args.model is not None else None
            source, described = describe_given_model(args, saved_model_dir, onnx_model, logger.print,
                                                     getattr(runner, "input_size", None), num_classes)
            described = described or (built if args.architecture else None)
            normalize, input_pixels = resolve_input_pixels(args, onnx_path, logger.print, onnx_model)
            del onnx_model
            if files is None:
                data, steps, records = batches(args, num_classes, logger.print)
                if normalize is not None:
                    data = ((normalize(images), labels) for images, labels in data)
            else:
                steps = None
            # The settings the run uses: the input size and class count of the model that was loaded, where the
            # flags left them to it (--image-size unset, --num-classes only applies to --architecture).
            flags = {name: value for name, value in vars(args).items() if name != "given"}
            if args.model and not args.tf_trt and (isinstance(runner, TFRunner) or args.backend == "onnxruntime"):
                flags["amp"] = False  # a given model runs in its own precision (said above), which --amp leaves
            if args.data_dir or files is not None:  # one pass over the images, whatever --num-iter said (above)
                flags["num_iter"] = None
            if files is not None:
                flags["warmup_steps"] = None
            # What was loaded, for a log read later or elsewhere: the model's absolute path, the directory the
            # run's relative paths are relative to, and what the model is (its record when it agrees with its
            # graph: architecture, checkpoint, step, class names, input size; the line printed above).
            from runtime import startup
            loaded = {"working_directory": os.getcwd(),
                      "model_path": os.path.abspath(args.model) if args.model else None,
                      "model_description": described, "model_source": recorded_fields(source)}
            if files is not None:
                loaded["to_predict_path"] = os.path.abspath(args.to_predict)
                loaded["files"] = len(files) + len(files.skipped)
            logger.log(step="PARAMETER", data=flags | loaded | {"num_classes": num_classes, "steps": steps,
                                                                "input_pixels": input_pixels} | frozen_weights
                       | startup.environment_parameters(devices=run_devices(args, runner)))
            logger.print(logger.destination())
            if frozen_weights:
                logger.print(devices.FROZEN_WEIGHTS_NOTE)
            where = f" on {runner.providers[0]}" if getattr(runner, "providers", None) else ""
            if files is not None:
                return predict_images(args, runner, normalize, files, source, logger, where)
            logger.print(f"Running {steps} steps of batch {args.batch_size} with backend {args.backend}{where}")
            return benchmark(runner, data, steps, args.batch_size, args.warmup_steps, logger, records)
    finally:
        logger.close()


@command
def main(argv=None):
    """Exit status 0; 1 when --to-predict had to skip a file it could not use (2: bad input before anything ran)."""
    args = parse_args(argv)
    if __name__ == "__main__":
        from utils import devices
        devices.pool_cpu_memory()
        if args.backend == "tf":
            # A serving process: it loads one model and never changes its weights
            # (utils/devices.assume_frozen_weights).
            devices.assume_frozen_weights()
    result = run(args)
    return 1 if getattr(result, "failed", 0) else None


if __name__ == "__main__":
    sys.exit(main())
