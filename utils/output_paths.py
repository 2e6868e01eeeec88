"""Where a tool will write, checked before it starts its work: a directory or file it cannot create is one error
line at once, not a traceback after an hour of training (docs/RELIABILITY.md#bad-input).

The checks find the nearest existing ancestor of the path and ask the operating system whether it is a directory
this process may write into. They cannot foresee a full disk or a path taken by another process in the meantime:
the writers turn those into one line of their own (model/export.py, model/checkpoint/write.py, `replaced_file`
below)."""

import contextlib
import glob
import os
import re
import uuid

from utils.errors import UserError, first_line


def _existing_ancestor(path):
    """The nearest existing path at or above `path` (absolute)."""
    path = os.path.abspath(path)
    while not os.path.lexists(path):
        path = os.path.dirname(path)
    return path


def on_read_only_file_system(path):
    """Whether `path`'s file system is mounted read-only (which stops root too); False when that cannot be told."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _not_writable(path):
    """Why `path`, which os.access says may not be written, cannot be: its read-only file system, or its
    permissions."""
    return "is on a read-only file system" if on_read_only_file_system(path) else "is not writable"


def _check_parent_links(flag, path):
    """UserError when `path` goes up (`..`) out of a directory that does not exist, or out of a symbolic link: the
    system resolves `d/..` only when `d` is a directory, and from a link's target, while os.path.abspath and
    TensorFlow's file system drop both names (a training through `link/../m` wrote its checkpoints in one directory
    and its state file in another)."""
    prefix = os.sep if os.path.isabs(path) else ""
    for part in path.split(os.sep):
        if part == ".." and prefix not in ("", os.sep):
            if os.path.islink(prefix.rstrip(os.sep)):
                raise UserError("{} {} goes up out of the symbolic link {}, which the system and TensorFlow resolve "
                                "to different directories: give the path without it".format(
                                    flag, path, prefix.rstrip(os.sep)))
            if not os.path.isdir(prefix):
                raise UserError("{} {} cannot be created: it goes up out of {}, which is not a directory".format(
                    flag, path, prefix.rstrip(os.sep)))
        prefix = os.path.join(prefix, part) if part else prefix


def check_unexpanded_home(flag, path):
    """UserError for a new path starting with `~`: the shell expands it only at the start of a word, not after
    `--flag=`, so `--results_dir=~/runs` would create a directory named `~` in the current one."""
    first = path.split(os.sep)[0]
    if first.startswith("~") and not os.path.lexists(first):
        raise UserError("{} {} starts with {}, which the shell did not expand (it does not after '='): write {} {} "
                        "with a space, or the full path".format(flag, path, first, flag, path))


# What TensorFlow's file-name matching takes as pattern syntax and its checkpoint reader (TensorSliceReader) and
# SavedModel loader then do not match literally: a character class `[...]` and an escape `\`. (`*`, `?`, and a `[`
# with no `]` after it match themselves.)
TENSORFLOW_PATTERN = re.compile(r"\[.*\]|\\")


def check_tensorflow_path(flag, path):
    """UserError when `path` (a checkpoint, a model_dir, a SavedModel) holds a character TensorFlow reads as a
    pattern: a checkpoint written there could not be read back (`Failed to find any matching files`), so the run
    would end, its steps trained, unable to resume, evaluate or export."""
    if not path:
        return
    found = TENSORFLOW_PATTERN.search(os.path.abspath(path))
    if found:
        what = "'\\'" if found.group(0) == "\\" else "'[' and ']'"
        raise UserError("{} {} holds {}, which TensorFlow reads as a file-name pattern: it could not read back a "
                        "checkpoint or SavedModel there; use a path without {}".format(
                            flag, os.path.abspath(path), what, "it" if found.group(0) == "\\" else "them"))


def _check_can_create_in(flag, path, parent):
    """UserError unless `parent` (where `path` or its first missing ancestor would be created) is a writable
    directory."""
    check_unexpanded_home(flag, path)
    _check_parent_links(flag, path)
    ancestor = _existing_ancestor(parent)
    if not os.path.isdir(ancestor):
        raise UserError("{} {} cannot be created: {} is not a directory".format(flag, path, ancestor))
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise UserError("{} {} cannot be created: directory {} {}".format(flag, path, ancestor,
                                                                         _not_writable(ancestor)))


def check_output_dir(flag, path, default=None):
    """UserError unless directory `path` exists and is writable, or can be created. `default`: the flag's default
    value; when `path` is it and is the current directory (`--results_dir .`), the error says so, since the user
    may not have given the flag at all."""
    if not path:  # `--flag ""` (an unset shell variable): os.makedirs("") fails after the checks below pass
        raise UserError("{} is empty: give the directory to write to".format(flag))
    _check_parent_links(flag, path)
    # A trailing slash makes lexists() false for a file or a dangling link (ENOTDIR / ENOENT): judge the name itself.
    name = path.rstrip(os.sep) or path
    if os.path.lexists(name) or os.path.isdir(path):
        if os.path.islink(name) and not os.path.exists(name):
            raise UserError("{} {} is a symbolic link to {}, which does not exist".format(
                flag, path, os.readlink(name)))
        if not os.path.isdir(path):
            raise UserError("{} {} exists and is not a directory".format(flag, path))
        if not os.access(path, os.W_OK | os.X_OK):
            raise UserError("{} {} {}{}".format(flag, path, _not_writable(path), _default_note(flag, path, default)))
        return
    _check_can_create_in(flag, path, os.path.dirname(os.path.abspath(path)))


def _default_note(flag, path, default):
    """What to add when `path` is the flag's default and the current directory: where that is, and what to do."""
    if default is None or path != default or os.path.abspath(path) != os.getcwd():
        return ""
    return (" ({} is the current directory, {}, and the flag's default when it is not given): give {} a writable "
            "directory, or run from one".format(path, os.getcwd(), flag))


def check_output_file(flag, path):
    """UserError unless file `path` can be written: appended to if it exists, or created (also under a temporary
    name beside it, as the atomic writers do)."""
    if not path:  # (`--output ""`: nothing would be written, and it was said as written)
        raise UserError("{} is empty: give the name of the file to write".format(flag))
    _check_parent_links(flag, path)
    if os.path.isdir(path):
        raise UserError("{} {} is a directory (give the name of the file to write)".format(flag, path))
    if os.path.lexists(path) and not os.access(path, os.W_OK):
        raise UserError("{} {} {}".format(flag, path, _not_writable(path)))
    _check_can_create_in(flag, path, os.path.dirname(os.path.abspath(path)))


def earlier_file_kept(path):
    """The clause for an output a stopped run did not write, when a file of that name was there before: it is still
    there (writes are atomic), and it is not this run's output. Empty when there is none."""
    return "; the file there is the one from before, not this run's" if os.path.lexists(path) else ""


@contextlib.contextmanager
def replaced_path(path, temporary=None):
    """Yields a temporary path beside `path` for the block to write (by default `.<name>.tmp-<hex>`, hidden, which
    no `train-*` or `*.jpg` pattern matches) and renames it over `path` when the block ends, so `path` is absent, its
    previous version or complete, never half-written. An OSError (a full disk) is one UserError, `cannot write
    <path>: <reason>`; on any exception, an interrupt included, the temporary is removed, with any file the writer
    named after it (tf.io.write_graph's own `<temporary>.tmp<hex>`). A symbolic link's target is what is replaced
    (the link stays), and a device or a pipe (`/dev/stdout`) is written directly."""
    if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):  # (links followed)
        # a device or a pipe (`--csv /dev/stdout`): written as it is; replaced by a file, /dev/stdout of the whole
        # machine became one (as root)
        try:
            yield path
        except OSError as error:
            raise UserError("cannot write {}: {}".format(path, error.strerror or first_line(error))) from None
        return
    if os.path.islink(path):  # the file the link names is replaced, not the link by a file
        path, temporary = os.path.realpath(path), None
    if temporary is None:
        directory, name = os.path.split(path)
        temporary = os.path.join(directory, ".{}.tmp-{}".format(name, uuid.uuid4().hex))
    try:
        yield temporary
        os.replace(temporary, path)
    except OSError as error:
        raise UserError("cannot write {}: {}".format(path, error.strerror or first_line(error))) from None
    finally:
        for leftover in glob.glob(glob.escape(temporary) + "*"):  # nothing once renamed
            try:
                os.remove(leftover)
            except OSError:
                pass


@contextlib.contextmanager
def replaced_file(path, mode="w", **open_args):
    """Yields a file open for writing at `replaced_path`'s temporary, which replaces `path` once it is closed."""
    with replaced_path(path) as temporary:
        with open(temporary, mode, **open_args) as handle:
            yield handle
