"""utils/output_paths.py: where a tool will write, checked before its work, each problem one line naming the flag."""
import os

import pytest

from utils import output_paths
from utils.errors import UserError


@pytest.fixture
def blocker(tmp_path):
    """A file where a directory would have to be."""
    path = tmp_path / "a_file"
    path.write_text("x")
    return path


def error(check, flag, path, **options):
    with pytest.raises(UserError) as raised:
        check(flag, str(path), **options)
    return str(raised.value)


def test_a_directory_that_exists_or_can_be_created_passes(tmp_path):
    output_paths.check_output_dir("--export_dir", str(tmp_path))
    output_paths.check_output_dir("--export_dir", str(tmp_path / "new" / "deeper"))
    output_paths.check_output_file("--output", str(tmp_path / "new" / "model.onnx"))
    (tmp_path / "log.json").write_text("")
    output_paths.check_output_file("--log-path", str(tmp_path / "log.json"))  # appended to
    assert sorted(os.listdir(tmp_path)) == ["log.json"]  # the checks create nothing


def test_a_file_in_the_way_is_named(tmp_path, blocker):
    assert error(output_paths.check_output_dir, "--export_dir", blocker) == \
        f"--export_dir {blocker} exists and is not a directory"
    assert error(output_paths.check_output_dir, "--export_dir", blocker / "sub" / "dir") == \
        f"--export_dir {blocker / 'sub' / 'dir'} cannot be created: {blocker} is not a directory"
    assert error(output_paths.check_output_file, "--output", blocker / "model.onnx") == \
        f"--output {blocker / 'model.onnx'} cannot be created: {blocker} is not a directory"


def test_a_file_with_a_trailing_slash_or_a_dangling_link_is_named_as_such(tmp_path, blocker, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert error(output_paths.check_output_dir, "--model_dir", "a_file/") == \
        "--model_dir a_file/ exists and is not a directory"
    os.symlink("nowhere/model", "dangling")
    for given in ("dangling", "dangling/"):
        assert error(output_paths.check_output_dir, "--model_dir", given) == \
            f"--model_dir {given} is a symbolic link to nowhere/model, which does not exist"
    os.symlink("a_file", "to_a_file")
    assert error(output_paths.check_output_dir, "--model_dir", "to_a_file/") == \
        "--model_dir to_a_file/ exists and is not a directory"


def test_a_path_that_goes_up_out_of_a_missing_directory_is_refused(tmp_path, monkeypatch):
    """`missing/../f.pb` names tmp_path/f.pb to os.path.abspath, but the system needs `missing` to exist: the check
    passed and the export failed after its work (`cannot write ...: No such file or directory`)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "there").mkdir()
    for path in ("missing/../f.pb", str(tmp_path / "missing" / ".." / "f.pb")):
        with pytest.raises(UserError, match=r"^--output_file .* cannot be created: it goes up out of .*missing, "
                                            "which is not a directory$"):
            output_paths.check_output_file("--output_file", path)
        with pytest.raises(UserError, match="goes up out of"):
            output_paths.check_output_dir("--results_dir", path)
    output_paths.check_output_file("--output_file", "there/../f.pb")
    output_paths.check_output_file("--output_file", "../f.pb")
    output_paths.check_output_dir("--results_dir", str(tmp_path / "there" / ".." / "new"))


def test_a_path_that_goes_up_out_of_a_symbolic_link_is_refused(tmp_path, monkeypatch):
    """`lnk/../m`: the system goes up from the link's target, TensorFlow's file system drops both names; a training
    wrote its checkpoints' temporaries in one directory and its state file in the other, and exited 0."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deep" / "sub").mkdir(parents=True)
    (tmp_path / "lnk").symlink_to(tmp_path / "deep" / "sub")
    (tmp_path / "m").mkdir()  # also when the directory exists (a second run)
    for check in (output_paths.check_output_dir, output_paths.check_output_file):
        with pytest.raises(UserError, match="^--model_dir lnk/../m goes up out of the symbolic link lnk, which the "
                                            "system and TensorFlow resolve to different directories"):
            check("--model_dir", "lnk/../m")
    output_paths.check_output_dir("--model_dir", "lnk/m")


def test_a_path_with_a_tilde_the_shell_left_is_refused(tmp_path, monkeypatch):
    """`--results_dir=~/runs` reaches the tool as `~/runs` (no expansion after '='): it created ./~/runs."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"^--results_dir ~/runs starts with ~, which the shell did not expand "
                                        r"\(it does not after '='\): write --results_dir ~/runs with a space"):
        output_paths.check_output_dir("--results_dir", "~/runs")
    with pytest.raises(UserError, match="did not expand"):
        output_paths.check_output_file("--output_file", "~other/m.pb")
    assert not os.path.lexists(tmp_path / "~")
    (tmp_path / "~").mkdir()  # a directory really named so is the user's to use
    output_paths.check_output_dir("--results_dir", "~/runs")


def test_a_path_tensorflow_reads_as_a_pattern_is_refused_and_only_such_a_path(tmp_path):
    """TensorFlow's checkpoint reader matches its path as a pattern: a checkpoint written under `[` or `\\` cannot be
    read back (a run trained to its end, then could not resume, evaluate or export). The characters refused are
    exactly those TensorFlow itself fails on."""
    import tensorflow as tf
    failing = []
    for name in ("a[b]", "a[b", "a]b", "a\\b", "a*b", "a?b", "a{b,c}", "[x]/y", "[/]"):
        directory = tmp_path / name
        prefix = tf.train.Checkpoint(v=tf.Variable(1.0)).write(str(directory / "model.ckpt-1"))
        try:
            tf.train.load_checkpoint(prefix)
        except (tf.errors.NotFoundError, ValueError):
            failing.append(name)
        refused = None
        try:
            output_paths.check_tensorflow_path("--model_dir", str(directory))
        except UserError as raised:
            refused = str(raised)
        assert (refused is not None) == (name in failing), name
    assert failing == ["a[b]", "a\\b", "[x]/y", "[/]"]
    assert error(output_paths.check_tensorflow_path, "--model_dir", tmp_path / "exp[lr=0.1]") == (
        "--model_dir {} holds '[' and ']', which TensorFlow reads as a file-name pattern: it could not read back a "
        "checkpoint or SavedModel there; use a path without them".format(tmp_path / "exp[lr=0.1]"))
    output_paths.check_tensorflow_path("--export_dir", None)


def test_an_empty_file_name_is_refused(tmp_path):
    """`export_onnx.py --output ""` said `Wrote  (opset 17, ...)` and wrote nothing."""
    assert error(output_paths.check_output_file, "--output", "") == (
        "--output is empty: give the name of the file to write")


def test_a_directory_given_for_a_file_is_named(tmp_path):
    assert error(output_paths.check_output_file, "--log-path", tmp_path) == \
        f"--log-path {tmp_path} is a directory (give the name of the file to write)"


def test_a_directory_the_process_may_not_write_is_named(tmp_path, monkeypatch):
    """The operating system's answer (os.access) decides; root passes permission bits, so it is simulated."""
    locked = tmp_path / "locked"
    locked.mkdir()
    monkeypatch.setattr(output_paths.os, "access", lambda path, mode: os.path.abspath(path) != str(locked))
    assert error(output_paths.check_output_dir, "--results_dir", locked) == f"--results_dir {locked} is not writable"
    assert error(output_paths.check_output_dir, "--results_dir", locked / "run") == \
        f"--results_dir {locked / 'run'} cannot be created: directory {locked} is not writable"
    assert error(output_paths.check_output_file, "--output_file", locked / "rn50.pb") == \
        f"--output_file {locked / 'rn50.pb'} cannot be created: directory {locked} is not writable"
    readonly_file = tmp_path / "log.json"
    readonly_file.write_text("")
    monkeypatch.setattr(output_paths.os, "access", lambda path, mode: os.path.abspath(path) != str(readonly_file))
    assert error(output_paths.check_output_file, "--log-path", readonly_file) == \
        f"--log-path {readonly_file} is not writable"


def test_an_empty_directory_name_is_named_as_such():
    """`--output_directory ""` passed the check (its parent, the current directory's, can be written) and ended in
    os.makedirs' `FileNotFoundError: ''` traceback (dataprep) or `cannot create --model_dir : No such file or
    directory` (main.py)."""
    assert error(output_paths.check_output_dir, "--output_directory", "") == \
        "--output_directory is empty: give the directory to write to"


def test_a_replaced_file_is_its_previous_version_or_complete_never_half_written(tmp_path, monkeypatch):
    from tests._reliability_helpers import full_disk_for
    path = tmp_path / "labels.txt"
    path.write_text("previous\n")
    with output_paths.replaced_file(str(path)) as handle:
        handle.write("new\n")
        assert path.read_text() == "previous\n"  # until the block ends
    assert path.read_text() == "new\n" and os.listdir(tmp_path) == ["labels.txt"]
    full_disk_for(monkeypatch, lambda name: ".tmp-" in name)
    with pytest.raises(UserError) as raised:
        with output_paths.replaced_file(str(path)) as handle:
            handle.write("newer\n")
    assert str(raised.value) == f"cannot write {path}: No space left on device"
    assert path.read_text() == "new\n" and os.listdir(tmp_path) == ["labels.txt"]
    monkeypatch.undo()
    with pytest.raises(KeyboardInterrupt):  # any exception, an interrupt included, removes the temporary
        with output_paths.replaced_file(str(path)) as handle:
            handle.write("cut short")
            raise KeyboardInterrupt
    assert path.read_text() == "new\n" and os.listdir(tmp_path) == ["labels.txt"]


def test_a_read_only_file_system_is_named_as_the_reason(tmp_path, monkeypatch):
    """A read-only mount stops root too (os.access says so); statvfs's flag tells it from permissions. Both are
    simulated, as a mount needs privileges."""
    mount = tmp_path / "ro"
    mount.mkdir()
    real_statvfs = os.statvfs

    class ReadOnly:
        def __init__(self, result):
            self.f_flag = result.f_flag | os.ST_RDONLY

    monkeypatch.setattr(output_paths.os, "access", lambda path, mode: not os.path.abspath(path).startswith(str(mount)))
    monkeypatch.setattr(output_paths.os, "statvfs", lambda path: ReadOnly(real_statvfs(path)) if os.path.abspath(
        path).startswith(str(mount)) else real_statvfs(path))
    assert error(output_paths.check_output_file, "--log_filename", mount / "x.json") == \
        f"--log_filename {mount / 'x.json'} cannot be created: directory {mount} is on a read-only file system"
    assert error(output_paths.check_output_dir, "--results_dir", mount) == \
        f"--results_dir {mount} is on a read-only file system"


def test_the_current_directory_as_a_flags_default_is_named_as_such(tmp_path, monkeypatch):
    """`--results_dir .`, its default: the user may not have given the flag, so the line says what `.` is and that
    it is the default (until 2026-12-06 only `--results_dir . is on a read-only file system`)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(output_paths.os, "access", lambda path, mode: False)
    monkeypatch.setattr(output_paths, "on_read_only_file_system", lambda path: True)
    assert error(output_paths.check_output_dir, "--results_dir", ".", default=".") == (
        f"--results_dir . is on a read-only file system (. is the current directory, {os.getcwd()}, and the flag's "
        "default when it is not given): give --results_dir a writable directory, or run from one")
    assert error(output_paths.check_output_dir, "--model_dir", ".") == "--model_dir . is on a read-only file system"


def test_a_replaced_link_keeps_the_link_and_a_device_is_written_directly(tmp_path):
    """The atomic replace renamed its temporary over the path: a symbolic link became a regular file (its target
    left as it was), and as root `--csv /dev/stdout` replaced the machine's /dev/stdout by a file."""
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "curves.csv").write_text("old")
    (tmp_path / "link.csv").symlink_to(tmp_path / "shared" / "curves.csv")
    with output_paths.replaced_file(str(tmp_path / "link.csv")) as handle:
        handle.write("new")
    assert os.path.islink(tmp_path / "link.csv") and (tmp_path / "shared" / "curves.csv").read_text() == "new"
    read, write = os.pipe()
    os.set_blocking(read, False)
    with output_paths.replaced_file("/dev/fd/{}".format(write)) as handle:
        handle.write("to a pipe")
    os.close(write)
    assert os.read(read, 100) == b"to a pipe"
    os.close(read)
