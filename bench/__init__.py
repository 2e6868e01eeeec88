"""The benchmarks, each run as `python -m bench.<name>` (docs/BENCHMARKS.md).

Python imports this package before it runs the module, so a benchmark process is set up here, before any of them
imports TensorFlow: it keeps freed CPU memory as main.py's and inference.py's processes do
(utils/devices.pool_cpu_memory), so that it times what they run (TF_CPU_ALLOCATOR_USE_BFC=false times malloc's),
and its stderr drops TensorFlow's start-up lines as every tool's does (utils/quiet.py; RN50_VERBOSE=1 keeps them).
Imported by another program (the tests), it changes nothing.
"""
import sys


def started_as_a_benchmark(argv=None):
    """Whether the interpreter's own command line (`sys.orig_argv`) runs one of bench/'s modules with `-m`."""
    argv = sys.orig_argv if argv is None else argv
    return any(arg == "-m" and name.startswith("bench.") for arg, name in zip(argv, argv[1:]))


if started_as_a_benchmark():
    from utils import devices, quiet

    devices.pool_cpu_memory()
    quiet.setup([])
