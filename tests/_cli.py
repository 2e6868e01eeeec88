"""How the tests run the project's command-line tools: in this process (`main_in_process`, `tool_in_process`) where
the process boundary is not what is tested, in a child process (`run_script`, `run_command`) where it is (signals,
kill -9, several workers, the stderr filter of utils/quiet.py, the installed CLI, shell scripts). Each returns a
`Result` with the `returncode`, `stdout` and `stderr` a shell user would see."""

import contextlib
import dataclasses
import importlib
import io
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass
class Result:
    args: list
    returncode: int
    stdout: str
    stderr: str


def child_env(**extra):
    """The environment of a child process: no GPU, TensorFlow's C++ log quiet, plus `extra`."""
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "", **extra}


def run_command(command, *, check=True, timeout=900, env=None, umask=None, cwd=ROOT):
    """`command` (a list: a program and its arguments) in a child process that runs to its end, output captured;
    `check`: fail the test with the child's output unless it exits 0; `umask` is applied in the child before exec.
    (tests/_reliability_helpers.Process starts the children a test signals or kills while they run.)"""
    preexec = (lambda: os.umask(umask)) if umask is not None else None
    command = [str(part) for part in command]
    completed = subprocess.run(command, cwd=cwd, env=env or child_env(), capture_output=True, text=True,
                               timeout=timeout, preexec_fn=preexec)
    result = Result(command, completed.returncode, completed.stdout, completed.stderr)
    if check:
        require_success(result)
    return result


def run_script(script, *args, **options):
    """`python <script> args` in a child process (script may be "-m package.module"); options as run_command."""
    return run_command([sys.executable, *script.split(), *args], **options)


def require_success(result):
    if result.returncode != 0:
        raise AssertionError("{} failed ({}):\n{}\n{}".format(" ".join(map(str, result.args[:3])), result.returncode,
                                                             result.stdout[-3000:], result.stderr[-3000:]))
    return result


def tool_in_process(module, *args, check=True):
    """`python <module>.py args` called in this process: `module`'s `main(argv)` (a utils/errors.command), with
    its stdout and stderr captured and its exit status (argparse's SystemExit included) returned. The process-wide
    settings a run may change (op determinism, Grappler's options, the umask) are put back afterwards."""
    from tensorflow.python.framework import config as tf_config
    argv = [str(arg) for arg in args]
    stdout, stderr = io.StringIO(), io.StringIO()
    determinism = tf_config.is_op_determinism_enabled()
    optimizer_options = tf_config.get_optimizer_experimental_options()
    umask = os.umask(0o022)
    os.umask(umask)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                status = importlib.import_module(module).main(argv)
            except SystemExit as exit_:
                status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
    finally:
        os.umask(umask)
        if tf_config.is_op_determinism_enabled() and not determinism:
            tf_config.disable_op_determinism()
        if tf_config.get_optimizer_experimental_options() != optimizer_options:  # --seed's (runtime/startup.py)
            tf_config.set_optimizer_experimental_options({"arithmetic_optimization": True, **optimizer_options})
        import keras
        keras.backend.clear_session(free_memory=False)  # the collector runs on its own (tests/conftest.py)
    result = Result([module, *argv], status or 0, stdout.getvalue(), stderr.getvalue())
    if check:
        require_success(result)
    return result


def main_in_process(*args, check=True):
    """`python main.py args`, in this process (tool_in_process)."""
    return tool_in_process("main", *args, check=check)
