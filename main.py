"""Entry point: parse flags -> set up devices, precision and distribution -> Runner -> run the mode
(docs/ORIGINAL.md#modes).

    python main.py --mode {train,train_and_evaluate,evaluate,predict,training_benchmark,inference_benchmark} \
        --batch_size N [flags]

Bad input ends with one line `ERROR: <what is wrong>` on stderr and exit status 2, before anything is written.
"""

import contextlib
import os
import signal
import sys

from runtime import settings as run_settings
from runtime.config import ORIGINAL_FLAG_DESTS
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


# Modes that load their weights once and never change them: a process run for one of them may let oneDNN keep each
# weight's reordered copy (utils/devices.assume_frozen_weights). evaluate is not one: it swaps in the EMA weights.
FIXED_WEIGHT_MODES = ("predict", "inference_benchmark")


# Said at start-up when no --cpu was given and the process sees no GPU (its PARAMETER record's environment.devices
# says the same): before, such a run went on on the CPU without a word.
NO_GPU_LINE = "No GPU visible: running on the CPU (pass --cpu to say the CPU is meant; docs/GPU.md to use a GPU)"


def _unsaid(_line):
    """The settings' log of a worker other than rank 0 (rank 0 says the same lines)."""


def run(argv=None, runner_class=None, own_process=False):
    """Runs main.py with `argv`; its exit status. `runner_class`: a subclass of runtime/runner.Runner to run the mode
    with (one that records what it trained, as tests/_dist_train_worker.py does); by default the Runner.
    `own_process`: main.py runs as a script, so the process is this run's alone."""
    _, config, given = run_settings.parse(argv)
    for key, value in RUNTIME_ENVIRONMENT.items():
        os.environ.setdefault(key, value)

    from utils import devices
    if own_process:  # (TensorFlow's pool for CPU tensors: large ones are not faulted in again every step)
        devices.pool_cpu_memory()
    if config.mode in FIXED_WEIGHT_MODES and own_process:
        devices.assume_frozen_weights()
    elif config.mode not in FIXED_WEIGHT_MODES and devices.frozen_weights_assumed():
        raise UserError("{}={} makes oneDNN keep the first weights each conv sees; --mode {} changes or swaps weights "
                        "and would compute with stale ones: unset it".format(
                            devices.FROZEN_WEIGHTS_ENV, os.environ[devices.FROZEN_WEIGHTS_ENV], config.mode))

    from utils import engines
    requested = engines.detect_engine()
    # A partial launcher environment (SLURM_STEP_NUM_TASKS=2 without the rest of srun's variables) is named as such
    # before the inference modes refuse several processes: otherwise predict blamed "several GPUs" for a stale
    # variable. Horovod's MPI-launched case needs horovod imported (init_engine checks it), the others do not.
    engines.check_launch_environment(requested, horovod_over_mpi=True)
    run_settings.check_single_process(config, requested.size)  # before TensorFlow is imported

    with engines.wait_signals_blocked(requested):  # before TensorFlow's threads start (utils/distributed.WorkerWait)
        from runtime import startup
        from utils import distributed
        engine = distributed.init_engine(requested)
        platform, precision = startup.set_up(config, engine)
        distribution = distributed.create(engine, platform.replica_devices)
    with contextlib.ExitStack() as stack:
        stack.enter_context(startup.process_settings_restored())
        try:
            from utils.run_lock import RunLock
            if config.mode in run_settings.TRAINING_MODES and distribution.is_chief:
                # The run owns model_dir from before it reads the checkpoint to after its last write
                # (docs/RELIABILITY.md).
                stack.enter_context(RunLock(config.model_dir))
                # A save killed midway left its temporary shards: gone before this run writes anything (its log
                # first), which on a disk they filled would fail.
                from model.checkpoint import remove_save_debris
                remove_save_debris(config.model_dir)
            # ... and every run the directory of the log file it writes (--results_dir's, or an absolute or nested
            # --log_filename's): two runs never append to one log.json. A training's model_dir, held above, may be it.
            log_dir = os.path.dirname(os.path.abspath(config.log_path))
            if distribution.is_chief and not (config.mode in run_settings.TRAINING_MODES and os.path.realpath(
                    log_dir) == os.path.realpath(config.model_dir)):
                in_results_dir = os.path.realpath(log_dir) == os.path.realpath(config.results_dir)
                stack.enter_context(RunLock(config.results_dir if in_results_dir else log_dir,
                                            flag="--results_dir" if in_results_dir else "--log_filename"))
            # Rank 0 alone says what the settings resolve to (notes, `Using ... from <checkpoint>`): every worker
            # resolves the same flags against the same checkpoint, and N workers printed each line N times.
            resolved = run_settings.resolve(config, given, log=print if distribution.is_chief else _unsaid,
                                            replicas=distribution.num_replicas, workers=distribution.size,
                                            platform=platform, engine=engine)
        except UserError as error:
            distribution.start_together(error)
        distribution.start_together()
        try:
            return run_mode(resolved, distribution, platform, precision, runner_class, engine)
        except UserError:
            raise  # its own line, whatever its cause
        except Exception as error:
            failure = distribution.peer_failure(error)
            if failure is None:
                raise
            raise failure from None


def run_mode(resolved, distribution, platform, precision, runner_class=None, engine=None):
    """The mode of `resolved` (runtime/settings.RunSettings): log, Runner, train / evaluate / predict. `engine`: the
    utils/engines.Engine the run was started with, for the log."""
    from runtime import runner as runner_module
    from runtime import startup
    from utils.errors import INTERRUPT_STATUS, interrupt_line, on_interrupt
    from utils.logger import DLLogger

    config = resolved.config
    run_settings.check_single_process(config, distribution.num_replicas)
    try:
        if distribution.is_chief:
            os.makedirs(config.results_dir, exist_ok=True)
        logger = DLLogger(config.log_path if distribution.is_chief else None, enabled=distribution.is_chief)
    except OSError as error:
        where = "" if not error.filename or os.path.abspath(error.filename) == os.path.abspath(config.log_path) else \
            " (in {})".format(error.filename)
        raise UserError("cannot write the log {}: {}{}".format(config.log_path, error.strerror or error, where)) \
            from None
    # The settings the run uses, after the resolution (not the flags as typed).
    from utils import devices
    frozen_weights = devices.frozen_weights_parameters()
    if logger.enabled:  # (rank 0: the other ranks do not ask git for the code's version)
        logger.log(step="PARAMETER", data={key: getattr(config, key) for key in ORIGINAL_FLAG_DESTS}
                   | config.additions() | {"precision": precision.describe()} | config.extensions_in_use()
                   | resolved.parameters()
                   | distribution.parameters() | frozen_weights
                   | startup.environment_parameters(engine, devices=platform.describe_devices()))
    destination = logger.destination()
    if destination:
        logger.print(destination)
    if not config.cpu and not platform.gpu:
        logger.print(NO_GPU_LINE)
    if frozen_weights:
        logger.print(devices.FROZEN_WEIGHTS_NOTE)
    startup.set_seeds(config.seed, distribution.rank)
    startup.configure_xla(config, distribution)
    startup.configure_determinism(config, logger.print)
    runner = (runner_class or runner_module.Runner)(config, logger, distribution, platform, precision,
                                                    lineage=resolved.lineage, checkpoint=resolved.checkpoint)

    interrupted = None
    if config.mode in ("train", "train_and_evaluate", "training_benchmark"):
        try:
            runner.train(is_benchmark=config.mode == "training_benchmark")
        except runner_module.TrainingInterrupted as stop:
            interrupted = stop
    if interrupted is None and config.mode in ("train_and_evaluate", "evaluate", "inference_benchmark"):
        if distribution.is_chief:
            kept = "no evaluation result was written; run the same command again"
            if config.mode == "train_and_evaluate":
                with on_interrupt("the training checkpoints are kept, no evaluation result was written; run the "
                                  "same command again to evaluate{} (or --mode evaluate)".format(
                                      " and export" if config.export_dir else "")):
                    runner.evaluate("epoch", 1, config.batch_size, export_dir=config.export_dir)
            else:
                with on_interrupt(kept):
                    try:
                        runner.evaluate(config.iter_unit, config.num_iter, config.batch_size,
                                        is_benchmark=config.mode == "inference_benchmark", export_dir=config.export_dir)
                    except runner_module.TrainingInterrupted as stop:  # a benchmark: its figures are logged
                        interrupted = stop
        distribution.barrier()
    # status 1 when predict had to skip a file it could not use (2 is for bad input before anything ran)
    predict_failed = config.mode == "predict" and runner.predict(config.to_predict, config.labels_file).failed > 0
    # All workers leave together: a worker still busy (rank 0's final checkpoint) well after another exited is told
    # by TF's coordination service that the task crashed (BaseCollectiveExecutor::StartAbort), a false alarm.
    distribution.barrier()
    if interrupted is not None:  # the log says how the run ended, as predict's final record does
        logger.log(step=(), data={"interrupted": signal.Signals(interrupted.signum).name if interrupted.signum
                                  else "another worker's signal", "global_step": interrupted.step,
                                  "checkpoint_written": interrupted.checkpointed})
    logger.close()
    if interrupted is not None:
        if distribution.is_chief:
            print(str(interrupted), flush=True)
            if config.mode == "train_and_evaluate" and interrupted.checkpointed:  # exit 0 on SIGTERM: said
                print("Note: the evaluation{} of --mode train_and_evaluate did not run: run the same command again to "
                      "resume and evaluate".format(" and the export to --export_dir" if config.export_dir else ""),
                      flush=True)
            if interrupted.by_user:
                print(interrupt_line("main.py", signal.SIGINT, interrupted.outcome), file=sys.stderr, flush=True)
        else:  # rank 0's lines say what was kept: the others' would repeat them, and rank 0 alone checkpoints
            print("worker {} stopped with the others at step {}{}".format(
                distribution.rank, interrupted.step, "; rank 0 wrote the checkpoint" if interrupted.checkpointed
                else ""), flush=True)
        if interrupted.by_user:
            return INTERRUPT_STATUS[signal.SIGINT]
    return 1 if predict_failed else 0


@command
def main(argv=None):
    return run(argv, own_process=__name__ == "__main__")


if __name__ == "__main__":
    sys.exit(main())
