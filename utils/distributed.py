"""One small interface over the distribution engines (DESIGN: tf.distribute first, Horovod second).

The runner asks: which rank am I, how many workers, am I the chief, which strategy scopes the model, how do I
feed it data, how are gradients averaged, and "did any worker get a stop signal?". Engines:

- ``single``        one process, one device (``tf.distribute.get_strategy()``, the default strategy).
- ``mirrored``      one process, every visible GPU (``MirroredStrategy``); opt in with ``RN50_ENGINE=mirrored``.
- ``multi_worker``  one process per GPU and/or node (``MultiWorkerMirroredStrategy``): the cluster comes from
                    ``TF_CONFIG`` (``python -m runtime.launch`` writes it) or from SLURM (``srun``).
- ``horovod``       one process per GPU started by ``horovodrun``/``mpirun`` with ``horovod.tensorflow``
                    importable (``scripts/install_horovod.sh``).

Gradient aggregation (both engines; docs/SCALING.md). Each worker computes the gradient of its own mean loss
over its own batch of ``--batch_size``; ``reduce_gradients`` replaces it with the AVERAGE over all replicas
(Horovod's ``DistributedOptimizer`` default). Keras 3's optimizer (TF backend) would otherwise SUM the gradients
across the replicas of a tf.distribute strategy inside ``optimizer.apply`` (``_all_reduce_sum_gradients``);
``prepare_optimizer`` turns that second reduction off, so there is exactly one all-reduce per step. We average
ourselves instead of scaling by 1/replicas and letting Keras sum because Keras' ``LossScaleOptimizer`` decides
"finite or not" on the gradients it is given: on local gradients different replicas could decide differently
(one skips the step, one all-reduces: a hang); on the averaged gradients every replica decides the same.
``tests/test_distributed.py`` proves the average against a single-process computation.

Dataset sharding: the input pipeline reads the file shard ``rank`` of ``size`` (the original's per-rank files);
tf.distribute's auto-sharding is never applied on top (``distribute_dataset``).
"""

import dataclasses
import functools
import os
import signal
import socket
import threading
import time

import tensorflow as tf

from utils import engines
from utils.engines import (Engine, check_launch_environment, detect_engine,  # noqa: F401 - detect_engine: re-exported
                           int_env)
from utils.errors import PeerStopped, UserError

# How often (in steps) the workers agree on a stop request (the original's TrainingPartitionHook sync_freq).
SIGNAL_SYNC_EVERY = 10


@dataclasses.dataclass
class Distribution:
    strategy: tf.distribute.Strategy
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    backend: str = "single"
    _flag_calls: int = dataclasses.field(default=0, repr=False)

    @property
    def is_chief(self):
        return self.rank == 0

    @property
    def num_replicas(self):
        """Replicas whose batches make one global batch (workers x devices per worker)."""
        return self.strategy.num_replicas_in_sync

    def describe(self):
        """How the replicas are spread, for the log: e.g. "2 processes x 1 replica, multi_worker"."""
        per_process = self.num_replicas // max(self.size, 1)
        return "{} process{} x {} replica{}, {}".format(self.size, "es" * (self.size != 1), per_process,
                                                        "s" * (per_process != 1), self.backend)

    def parameters(self):
        """The PARAMETER record's account of a run over several replicas (--batch_size is per replica)."""
        if self.num_replicas == 1:
            return {}
        return {"replicas": self.num_replicas, "processes": self.size, "engine": self.backend}

    @property
    def jit_in_step(self):
        """Whether the per-replica train step may be `jit_compile`d: not when it holds collectives (XLA has no
        kernels for them here); the engines that all-reduce use XLA auto-clustering around them instead."""
        return self.num_replicas == 1 and self.size == 1

    # ---------------------------------------------------------------- hooks the runner calls
    def distribute_dataset(self, dataset):
        """The per-worker dataset (already file-sharded by rank) as the strategy wants it. One replica per
        process: the dataset itself (plain tensors go to `strategy.run`). Several local replicas
        (MirroredStrategy): each replica pulls its own batch of --batch_size; no auto-sharding."""
        if self.num_replicas // self.size <= 1:
            return dataset
        return self.strategy.distribute_datasets_from_function(lambda _context: dataset)

    def prepare_optimizer(self, optimizer):
        """Turns off Keras' own cross-replica SUM of gradients in `apply` (we average in `reduce_gradients`)."""
        if self.num_replicas > 1:
            inner = getattr(optimizer, "inner_optimizer", optimizer)
            inner._all_reduce_sum_gradients = _no_cross_replica_reduction  # noqa: SLF001 - see module doc
        return optimizer

    def reduce_gradients(self, grads):
        """In replica context: the average of `grads` over all replicas (identity for one replica)."""
        if self.num_replicas == 1:
            return grads
        context = tf.distribute.get_replica_context()
        return context.all_reduce(tf.distribute.ReduceOp.MEAN, list(grads))

    def broadcast_variables(self, variables):
        """Makes every worker hold rank 0's values. tf.distribute already broadcasts initial values when it
        creates variables, and all workers restore the same checkpoint, so this is Horovod's business."""

    def any_worker_flag(self, flag):
        """True on every worker when `flag` is True on any (preemption agreement, docs/ORIGINAL.md#preemption).
        Called every step; with several workers the collective runs every SIGNAL_SYNC_EVERY-th call, at the same step
        on all workers, and returns False in between."""
        if self.size == 1:
            return bool(flag)
        self._flag_calls += 1
        if self._flag_calls % SIGNAL_SYNC_EVERY:
            return False
        return self._sum_over_workers(1.0 if flag else 0.0) > 0

    def all_workers_flag(self, flag):
        """True on every worker when `flag` is True on any, agreed at once (every worker must call it)."""
        return bool(flag) if self.size == 1 else self._sum_over_workers(1.0 if flag else 0.0) > 0

    def barrier(self):
        """Waits for every worker (the original's MPI barrier after rank 0's evaluation)."""
        if self.size > 1:
            self._sum_over_workers(0.0)

    def _sum_over_workers(self, value):
        return float(_strategy_sum(self.strategy, value))

    def check_same_step(self, step):
        """Several workers: each compares the step it restored with rank 0's (one tiny collective: the sum of rank
        0's step and the others' zeros, exact in float32 below 2**24 steps). A worker that resumes at another step
        did not restore the checkpoint rank 0 did (a model_dir not shared by every node: docs/SCALING.md) and would
        train other weights under the same collectives, so it stops with a UserError naming both steps, and rank 0
        then stops at its next collective (PeerStopped). Returns rank 0's step; rank 0 alone says it."""
        if self.size == 1:
            return step
        chief_step = int(round(self._sum_over_workers(float(step) if self.is_chief else 0.0)))
        if chief_step != step:
            raise UserError("worker {} resumed at step {} but rank 0 at step {}: the workers did not restore the same "
                            "checkpoint (--model_dir must be on a file system every worker shares, docs/SCALING.md)"
                            .format(self.rank, step, chief_step))
        return chief_step

    def start_together(self, error=None):
        """Several workers: each tells the others whether it could start (rank 0's locks, the run's settings), so a
        worker whose peer stopped at the start says so in one line instead of failing later, in a collective the
        peer never joins. Raises `error` (this worker's own) if given, else PeerStopped when another worker could
        not start; returns when every worker could."""
        own = 0.0 if error is None else 1.0
        failed_elsewhere = self.size > 1 and self._sum_over_workers(own) - own > 0
        if error is not None:
            raise error
        if failed_elsewhere:
            raise PeerStopped("worker {} stopped: another worker could not start this run (its ERROR line says "
                              "why)".format(self.rank))

    def peer_failure(self, error):
        """The PeerStopped error for `error` when it is (or was raised while handling) a collective that failed
        because another worker is gone (it stopped on its own error, which it prints, or was killed), else None: this
        worker's one line then says so, instead of a traceback that blames the network. Keras re-raises an
        error from a layer's call as another type (a TypeError when it cannot rebuild TensorFlow's), so the
        chain of causes is searched."""
        if self.size == 1:
            return None
        seen = set()
        while error is not None and id(error) not in seen:
            reason = _horovod_peer_gone(error) or (type(error).__name__ if isinstance(error, PEER_FAILURE_ERRORS)
                                                   else None)
            if reason:
                return PeerStopped("worker {} stopped: a collective with the other workers failed ({}) because "
                                   "another worker stopped (its own ERROR line, or the launcher's line naming it when "
                                   "it was killed, says why) or lost its connection".format(self.rank, reason))
            seen.add(id(error))
            error = error.__cause__ or error.__context__
        return None


# The errors a collective raises when a peer worker has gone (connection refused or reset, the executor aborted).
PEER_FAILURE_ERRORS = (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError)
# Horovod's ops raise an UnknownError instead, saying one of these (seen with gloo when a peer was killed).
HOROVOD_PEER_GONE = ("Horovod has been shut down", "Connection reset by peer", "Connection closed by peer",
                     "Connection refused")


def _horovod_peer_gone(error):
    """What a Horovod op's error says of a peer's loss (one of HOROVOD_PEER_GONE, naming Horovod), or None."""
    message = str(error) if isinstance(error, tf.errors.OpError) else ""
    sign = next((sign for sign in HOROVOD_PEER_GONE if sign in message), None) if "Horovod" in message else None
    return sign if sign is None or sign.startswith("Horovod") else "Horovod: " + sign


def _no_cross_replica_reduction(grads_and_vars):
    return list(grads_and_vars)


def _strategy_sum(strategy, value):
    """Sum of a host scalar over all replicas of `strategy` (a tiny collective; each local replica adds the
    value once per worker, so it is divided back by the local replica count)."""
    local_replicas = max(1, len(strategy.extended.worker_devices))
    return _sum_function(strategy)(tf.constant(value, tf.float32)).numpy() / local_replicas


@functools.lru_cache(maxsize=None)
def _sum_function(strategy):
    """One traced all-reduce per strategy, the value its argument (a function made per call was traced anew every
    time, and TF warned about the retracing in every multi-worker run)."""
    @tf.function
    def reduce(value):
        def replica_fn():
            # a copy made on the replica's device: the captured argument itself has none to reduce to
            return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(value))
        return strategy.experimental_local_results(strategy.run(replica_fn))[0]
    return reduce


@dataclasses.dataclass
class HorovodDistribution(Distribution):
    """Horovod: averaged all-reduce of the gradients (hvd.grouped_allreduce, op Average), broadcast of rank 0's
    variables before training, per-rank files. The strategy is the default one (one replica per process)."""

    hvd: object = None

    @property
    def num_replicas(self):
        return self.size

    @property
    def jit_in_step(self):
        return False  # Horovod's XLA ops are the part install_horovod.sh leaves out

    def distribute_dataset(self, dataset):
        return dataset

    def prepare_optimizer(self, optimizer):
        return optimizer  # one replica per process: Keras' cross-replica sum is an identity

    def reduce_gradients(self, grads):
        grads = list(grads)
        return self.hvd.grouped_allreduce(grads, op=self.hvd.Average)

    def broadcast_variables(self, variables):
        # One by one, eagerly: hvd.broadcast_variables expects tf.Variables, Keras 3 variables are not.
        for index, variable in enumerate(variables):
            value = self.hvd.broadcast(tf.convert_to_tensor(variable), root_rank=0,
                                       name="broadcast_variable_{}".format(index))
            variable.assign(value)

    def _sum_over_workers(self, value):
        total = self.hvd.allreduce(tf.constant(value, tf.float32), op=self.hvd.Sum, name="signal_handler_all_reduce")
        return float(total.numpy())


# -------------------------------------------------------------------------------------------- engine selection
def init_engine(engine):
    """Initialises what must exist before devices are configured (Horovod: hvd.init()); returns the Engine with
    the real rank/size/local_rank."""
    if engine.name != "horovod":
        check_launch_environment(engine)
        return engine
    hvd = import_horovod()
    check_launch_environment(engine, horovod_over_mpi=hvd.mpi_built())
    if engine.size > 1:
        gloo_timeout = int_env("HOROVOD_GLOO_TIMEOUT_SECONDS", default=HOROVOD_GLOO_TIMEOUT)
        host, port = os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR"), os.environ.get("HOROVOD_GLOO_RENDEZVOUS_PORT")
        where = "at Horovod's rendezvous {}:{}".format(host, port) if host else "through MPI"
        # Gloo aborts the process (std::terminate, status 134, no line of ours) when its wait times out: this
        # worker's own deadline comes a second before it, with a line saying what was missing.
        with WorkerWait(engine, "process {} of {}".format(int_env("HOROVOD_RANK", default=0), engine.size),
                "the others {}".format(where),
                seconds=max(gloo_timeout - 1, 1) if host else worker_wait_seconds(),
                setting="HOROVOD_GLOO_TIMEOUT_SECONDS={}: Horovod aborts then".format(gloo_timeout)
                if host else WORKER_WAIT_ENV):
            if host:
                check_rendezvous(host, port)
            hvd.init()
    else:
        hvd.init()
    return dataclasses.replace(engine, rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank())


# How long a worker tries to reach Horovod's rendezvous server before it says it is not there. horovodrun starts it
# before any worker; Horovod's own HTTP client gives up after about 5 s of refused connections, and aborts.
RENDEZVOUS_PROBE_SECONDS = 10


def check_rendezvous(host, port, seconds=RENDEZVOUS_PROBE_SECONDS):
    """A UserError unless Horovod's rendezvous server at host:port accepts a connection within `seconds`: when it
    refuses them (no horovodrun: variables left from another job), hvd.init() tries for about 5 s, then aborts the
    process in C++ (`HTTP GET request failed too many times`, std::terminate, status 134) after the waiting line."""
    try:
        port_number = int(port)
    except (TypeError, ValueError):
        raise UserError("HOROVOD_GLOO_RENDEZVOUS_PORT={} is not a port number".format(port)) from None
    deadline = time.monotonic() + seconds
    while True:
        try:
            with socket.create_connection((host, port_number), timeout=max(min(deadline - time.monotonic(), 2), 0.1)):
                return
        except OSError as error:
            if time.monotonic() >= deadline:
                raise UserError("Horovod's rendezvous {}:{} cannot be reached ({}) within {:g} s: horovodrun, which "
                                "serves it, is not running; HOROVOD_* variables left from another job? Start the "
                                "processes with horovodrun, or unset HOROVOD_SIZE to run as one process".format(
                                    host, port, error.strerror or error, seconds)) from None
        time.sleep(0.2)


def import_horovod():
    try:
        import horovod.tensorflow as hvd
    except ImportError as error:
        raise UserError("this process was started by mpirun/horovodrun (or RN50_ENGINE=horovod) but "
                        "horovod.tensorflow cannot be imported ({}); install it with scripts/install_horovod.sh "
                        "or launch with `python -m runtime.launch --nproc N main.py ...`".format(error)) from None
    return hvd


def create(engine, replica_devices=()):
    """The Distribution for an initialised engine. Call after the devices are configured; `replica_devices`
    (utils/devices.Platform) are what a mirrored engine mirrors over (default: every visible GPU)."""
    if engine.name == "single":
        return single_process()
    if engine.name == "mirrored":
        strategy = tf.distribute.MirroredStrategy(devices=list(replica_devices) or None)
        return Distribution(strategy=strategy, backend="mirrored")
    if engine.name == "horovod":
        hvd = import_horovod()
        return HorovodDistribution(strategy=tf.distribute.get_strategy(), rank=hvd.rank(), size=hvd.size(),
                                   local_rank=hvd.local_rank(), backend="horovod", hvd=hvd)
    resolver = cluster_resolver()
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.AUTO)
    # The strategy's creation waits, in TensorFlow's C++, until every worker of the cluster has started: forever for
    # a worker that never comes (a TF_CONFIG left from another run), deaf to signals.
    with WorkerWait(engine, "worker {} of {}".format(engine.rank, engine.size),
                    "the other workers ({}) to start".format(", ".join(_peers(resolver))),
                    seconds=worker_wait_seconds(), setting=WORKER_WAIT_ENV):
        strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver,
                                                             communication_options=options)
    return Distribution(strategy=strategy, rank=engine.rank, size=engine.size, local_rank=engine.local_rank,
                        backend="multi_worker")


def _peers(resolver):
    """The addresses of the other tasks of `resolver`'s cluster."""
    own = (resolver.task_type, resolver.task_id)
    return [address for job, addresses in resolver.cluster_spec().as_dict().items()
            for index, address in (addresses.items() if isinstance(addresses, dict) else enumerate(addresses))
            if (job, index) != own]


# How long a worker waits for the others to start before it gives up (RN50_WORKER_WAIT_SECONDS; 0: for ever).
# Generous: `python -m runtime.launch` and `srun` start every worker at once, a hand-started node may come minutes
# later. TensorFlow's own registration timeout is not exposed by MultiWorkerMirroredStrategy.
WORKER_WAIT_ENV = "RN50_WORKER_WAIT_SECONDS"
WORKER_WAIT_SECONDS = 600
HOROVOD_GLOO_TIMEOUT = 30  # Horovod's default HOROVOD_GLOO_TIMEOUT_SECONDS
# The signals that end a worker waiting for the others (nothing has run yet: there is nothing to save).
WAIT_SIGNALS = engines.WAIT_SIGNALS
# How often the watcher looks at the waiting process's pending signals.
WATCH_EVERY_SECONDS = 0.05


def worker_wait_seconds():
    value = os.environ.get(WORKER_WAIT_ENV, "")
    try:
        seconds = float(value) if value else WORKER_WAIT_SECONDS
    except ValueError:
        seconds = -1
    if seconds < 0:
        raise UserError("{}={} is not a number of seconds (0: wait for ever)".format(WORKER_WAIT_ENV, value))
    return seconds


# The watcher process of a WorkerWait (argv: the waiting process's pid, the deadline in seconds or 0, how often to
# look, the line for a signal with {signal} in it, the line for the deadline). Every thread of the waiting process
# blocks WAIT_SIGNALS, so one sent to it stays pending, listed in /proc/<pid>/status (ShdPnd: sent to the process,
# SigPnd: to its main thread, as hex masks, bit N-1 for signal N). Its stdin ends when the wait does.
_WATCHER = """
import os, select, signal, sys, time
parent, seconds, every = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
on_signal, on_deadline = sys.argv[4:]
watched = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
signal.pthread_sigmask(signal.SIG_UNBLOCK, watched)  # inherited blocked from the waiting process: not its own
deadline = time.monotonic() + seconds if seconds else None
def pending():
    try:
        with open("/proc/{}/status".format(parent)) as status:
            fields = dict(line.split(":", 1) for line in status if ":" in line)
    except OSError:  # no /proc: the deadline alone
        return None
    mask = 0
    for name in ("ShdPnd", "SigPnd"):
        try:
            mask |= int(fields.get(name, "0").strip(), 16)
        except ValueError:
            pass
    return next((signum for signum in watched if mask >> (signum - 1) & 1), None)
def end(line):
    try:
        os.write(2, (line + "\\n").encode())
    except OSError:
        pass
    os.kill(parent, signal.SIGKILL)
    sys.exit(0)
while True:
    if sys.stdin in select.select([sys.stdin], [], [], every)[0]:
        sys.exit(0)
    signum = pending()
    if signum is not None:
        end(on_signal.format(signal=signal.Signals(signum).name))
    if deadline is not None and time.monotonic() >= deadline:
        end(on_deadline)
"""


def deliver_pending_wait_signals():
    """A WAIT_SIGNALS signal that came while they were blocked before a WorkerWait (TensorFlow's import, the device
    set-up: main.py blocks them from before it) is delivered now, to the command wrapper's handlers: it ends the
    command with its usual line and status (130, 143, 129), as it would have without the block."""
    if threading.current_thread() is not threading.main_thread():
        return
    if set(signal.sigpending()) & set(WAIT_SIGNALS):
        previous = signal.pthread_sigmask(signal.SIG_UNBLOCK, WAIT_SIGNALS)  # the handler runs here, and raises
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class WorkerWait:
    """Around a call that waits, in C++, for the other workers (MultiWorkerMirroredStrategy's creation, hvd.init()):
    says first, in one line, which engine was chosen from which variable and what it waits for; a SIGINT, SIGTERM or
    SIGHUP then ends the process at once with one line, as does the deadline, `seconds` (0: none), with an ERROR line.
    Nothing has been written yet (the run's locks, log and start checkpoint come after), so nothing is left behind.
    `who` is the waiting process ("worker 0 of 2"), `what` what it waits for ("the other workers (...) to start").

    How: the call holds Python's GIL while it waits, so no Python code of this process runs until it returns (never,
    when a worker does not come): not a signal handler, not a thread. And TensorFlow's preemption notifier takes
    SIGTERM over while the strategy is created (its C++ handler notes it and the wait goes on). So every thread of
    the process blocks WAIT_SIGNALS (main.py blocks them before TensorFlow starts its threads, which inherit the
    mask: utils/engines.wait_signals_blocked), a signal sent to it stays pending, and a small watcher process sees it
    there; it writes the line on the terminal's stderr (not through utils/quiet.py's filter, which could print it
    after the shell's prompt) and then kills this process: SIGKILL, status 137, the only way to end it from outside
    (nothing inside it can act). The worker waits for its watcher before it goes on."""

    def __init__(self, engine, who, what, seconds, setting):
        self.engine, self.who, self.what, self.seconds, self.setting = engine, who, what, seconds, setting

    def _lines(self):
        interrupted = ("INTERRUPTED: main.py stopped by {{signal}} while waiting for {}: no step had run, nothing to "
                       "keep (the wait, in TensorFlow's C++, cannot be interrupted: the process was killed, status "
                       "137)".format(self.what))
        chosen_by = " ".join(name for name in engines.MPI_SIZE_VARIABLES if name in os.environ) \
            if self.engine.name == "horovod" and self.engine.source != "RN50_ENGINE" else self.engine.source
        late = "ERROR: {} waited for {}; they did not within {:g} s ({}). If {} is left from another run, unset it " \
            "to run as one process".format(self.who, self.what, self.seconds, self.setting, chosen_by or "RN50_ENGINE")
        return interrupted, late

    def __enter__(self):
        deliver_pending_wait_signals()
        print("engine {}: {} waiting for {}; gives up after {} ({}); Ctrl-C stops it".format(
            self.engine.describe(), self.who, self.what, "{:g} s".format(self.seconds) if self.seconds else "never",
            self.setting), flush=True)
        import subprocess
        import sys
        # This thread's part (the others inherited it from main.py's); already blocked there, kept after the wait.
        self._previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, WAIT_SIGNALS)
        # Its own session: a Ctrl-C reaches this process, whose line the watcher then writes. Its stderr is the
        # terminal's own (sys.stderr's descriptor: utils/quiet.py sends only fd 2 through its filter).
        try:
            stderr = sys.stderr.fileno()
        except (AttributeError, ValueError, OSError):
            stderr = None
        self._watcher = subprocess.Popen(
            [sys.executable, "-c", _WATCHER, str(os.getpid()), str(self.seconds), str(WATCH_EVERY_SECONDS),
             *self._lines()], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr,
            start_new_session=True)
        return self

    def __exit__(self, *exc):
        self._watcher.stdin.close()  # the wait is over: the watcher leaves, and is waited for
        self._watcher.wait()
        signal.pthread_sigmask(signal.SIG_SETMASK, self._previous_mask)
        return False


def cluster_resolver():
    """The multi_worker engine's cluster: TF_CONFIG's, else the SLURM job step's. SLURM's resolver is given the GPUs
    this process sees (after utils/devices chose them; 0 on a CPU node): left to itself it counts them with
    `nvidia-smi`, which a CPU node does not have (FileNotFoundError), and it would count the node's, not the
    task's. It does not set CUDA_VISIBLE_DEVICES (auto_set_gpu=False): utils/devices did."""
    environ = os.environ  # where the resolvers read the cluster from
    if "TF_CONFIG" in environ:
        return tf.distribute.cluster_resolver.TFConfigClusterResolver()
    from tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver import expand_tasks_per_node
    busiest_node = max(expand_tasks_per_node(environ["SLURM_STEP_TASKS_PER_NODE"]))  # checked by init_engine
    return _SlurmResolver(len(tf.config.get_visible_devices("GPU")), busiest_node,
                          port_base=int_env("RN50_SLURM_PORT_BASE", default=8888, environ=environ))


class _SlurmResolver(tf.distribute.cluster_resolver.SlurmClusterResolver):
    """SLURM's resolver reporting `gpus`, the GPUs this process sees, as its accelerators (what
    MultiWorkerMirroredStrategy mirrors over). Its own GPU plan (for auto_set_gpu, off here) is given one GPU per task
    so that it can be made: with none it fails (`range() arg 3 must not be zero`)."""

    def __init__(self, gpus, busiest_node, **options):
        self._visible_gpus = gpus
        per_task = max(gpus, 1)
        super().__init__(auto_set_gpu=False, gpus_per_node=per_task * busiest_node, gpus_per_task=per_task, **options)

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        return {"GPU": self._visible_gpus}


def single_process():
    return Distribution(strategy=tf.distribute.get_strategy())
