"""Entry point: parse flags -> set up devices, precision and distribution -> Runner -> run the mode
(docs/ORIGINAL.md#modes).

    python main.py --mode {train,train_and_evaluate,evaluate,predict,training_benchmark,inference_benchmark} \
        --batch_size N [flags]

Bad input ends with one line `ERROR: <what is wrong>` on stderr and exit status 2, before anything is written.
"""

import os
import sys

from runtime.config import ORIGINAL_FLAG_DESTS, RunConfig, given_flags, parse_cmdline
from utils.errors import UserError, command

# The original's environment (docs/ORIGINAL.md#runtime-environment), where the variables still mean something in
# TF 2.21.
RUNTIME_ENVIRONMENT = {
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "TF_GPU_THREAD_MODE": "gpu_private",
    "TF_GPU_THREAD_COUNT": "2",
    "TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT": "1",
    "TF_AUTOTUNE_THRESHOLD": "2",
    "CUDA_CACHE_DISABLE": "0",
    "HOROVOD_GPU_ALLREDUCE": "NCCL",
}


def check_mode_arguments(config):
    """The mode checks (docs/ORIGINAL.md#modes) that need no TensorFlow, so bad input fails fast and writes nothing."""
    if config.mode == "predict":
        if config.to_predict is None:
            raise UserError("No data to predict on.")
        if not os.path.exists(config.to_predict):
            raise UserError("--to_predict {} does not exist".format(config.to_predict))
    from runtime.runner_utils import require_data_dir
    if config.mode in ("train", "train_and_evaluate"):
        require_data_dir(config.data_dir, "train")
    if config.mode == "evaluate":
        require_data_dir(config.data_dir, "validation")
    if config.data_dir is not None and not os.path.isdir(config.data_dir):
        raise UserError("--data_dir {} does not exist or is not a directory".format(config.data_dir))
    for flag, path in (("--results_dir", config.results_dir), ("--model_dir", config.model_dir)):
        if path and os.path.exists(path) and not os.path.isdir(path):
            raise UserError("{} {} exists and is not a directory".format(flag, path))
    if config.finetune_checkpoint and not (os.path.exists(config.finetune_checkpoint)
                                           or os.path.exists(config.finetune_checkpoint + ".index")):
        raise UserError("--finetune_checkpoint {} does not exist".format(config.finetune_checkpoint))


INFERENCE_MODES = ("evaluate", "predict", "inference_benchmark")
# RunConfig field -> (checkpoint metadata field, flag) that inference modes take from model_dir's checkpoint.
CHECKPOINT_SETTINGS = (("arch", "arch", "--arch"), ("num_classes", "num_classes", "--num_classes"),
                       ("image_size", "image_size", "--image_size"))


def adopt_checkpoint_settings(config, given, log=print):
    """Evaluate / predict / inference_benchmark build the model the checkpoint in model_dir was trained as: a
    setting left at its default is taken from the checkpoint (and said so), one given that contradicts it is
    refused. Training modes keep the flags (a resume checks them when it restores)."""
    import dataclasses
    from model import checkpoint_io
    if config.mode not in INFERENCE_MODES:
        return config
    path = checkpoint_io.latest_checkpoint(config.model_dir, warn=log)
    if path is None:
        return config
    info = checkpoint_io.inspect(path)
    changes = {}
    for field, source, flag in CHECKPOINT_SETTINGS:
        recorded, current = getattr(info, source), getattr(config, field)
        if recorded is None or recorded == current:
            continue
        if field == "image_size" and config.input_size != config.image_size:
            continue  # synthetic benchmark: --synthetic_data_size sets the input, any size runs
        if field in given:
            raise UserError("{} {} contradicts checkpoint {}, trained with {} {} (omit the flag to use the "
                            "checkpoint's)".format(flag, current, path, flag, recorded))
        changes[field] = recorded
        log("Using {} {} from checkpoint {}".format(flag, recorded, path))
    return dataclasses.replace(config, **changes) if changes else config


def run(argv=None):
    args = parse_cmdline(argv)
    for key, value in RUNTIME_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    config = RunConfig.from_args(args)
    check_mode_arguments(config)

    import tensorflow as tf
    from runtime import runner as runner_module
    from runtime import startup
    from utils import distributed
    from utils.logger import DLLogger

    engine = distributed.init_engine(distributed.detect_engine())
    if engine.size > 1 and config.mode in ("inference_benchmark", "predict"):
        raise UserError("Only single GPU inference is implemented.")
    platform, precision = startup.set_up(config, engine)
    distribution = distributed.create(engine, platform.replica_devices)
    config = adopt_checkpoint_settings(config, given_flags(argv))
    if distribution.num_replicas > 1 and config.mode in ("inference_benchmark", "predict"):
        raise UserError("Only single GPU inference is implemented.")
    try:
        if distribution.is_chief:
            os.makedirs(config.results_dir, exist_ok=True)
        logger = DLLogger(config.log_path if distribution.is_chief else None, enabled=distribution.is_chief)
    except OSError as error:
        raise UserError("cannot write the log in --results_dir {}: {}".format(config.results_dir, error)) from None
    logger.log(step="PARAMETER", data={key: getattr(args, key) for key in ORIGINAL_FLAG_DESTS}
               | {"num_classes": args.num_classes, "image_size": args.image_size,
                  "min_crop_area": args.min_crop_area} | config.extensions_in_use())
    startup.set_seeds(config.seed, distribution.rank)
    startup.configure_xla(config, distribution)
    if config.seed is not None:
        tf.config.experimental.enable_op_determinism()
    runner = runner_module.Runner(config, logger, distribution, platform, precision)

    interrupted = None
    if config.mode in ("train", "train_and_evaluate", "training_benchmark"):
        try:
            runner.train(is_benchmark=config.mode == "training_benchmark")
        except runner_module.TrainingInterrupted as stop:
            interrupted = stop
    if interrupted is None and config.mode in ("train_and_evaluate", "evaluate", "inference_benchmark"):
        if distribution.is_chief:
            if config.mode == "train_and_evaluate":
                runner.evaluate("epoch", 1, config.batch_size, export_dir=config.export_dir)
            else:
                runner.evaluate(config.iter_unit, config.num_iter, config.batch_size,
                                is_benchmark=config.mode == "inference_benchmark", export_dir=config.export_dir)
        distribution.barrier()
    # status 1 when predict had to skip a file it could not use (2 is for bad input before anything ran)
    predict_failed = config.mode == "predict" and runner.predict(config.to_predict, config.labels_file).failed > 0
    # All workers leave together: a worker still busy (rank 0's final checkpoint) ~10 s after another exited is told
    # by TF's coordination service that the task crashed (BaseCollectiveExecutor::StartAbort), a false alarm.
    distribution.barrier()
    logger.close()
    if interrupted is not None:
        print(str(interrupted), flush=True)
    return 1 if predict_failed else 0


@command
def main(argv=None):
    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
