"""Classifier dense kernel [C, N] -> 1x1 conv kernel [1, 1, C, N] in a checkpoint.

docs/ORIGINAL.md#checkpoint-post-processing describes the original tool.

    python postprocess_ckpt.py --input results/model.ckpt-1000 --output results_final_conv
    python postprocess_ckpt.py --input nvidia_rn50_qat/model.ckpt-5005 --output out   # the original's TF1 format

The result is loaded by a model built with --use_final_conv (export_frozen_graph.py --use_final_conv).
- Our checkpoints (prefix or model_dir; name-based, with metadata): every tensor is copied unchanged (BN statistics,
  Momentum slots, global_step, QAT ranges) except the classifier kernel, reshaped; the metadata then records the
  1x1-conv head. Written as `<output>/model.ckpt-<global_step>` with a `checkpoint` file. --dense_layer does not
  apply (the classifier's name follows the arch in the metadata).
- The original's TF1 name-based checkpoints: the same copy, with --dense_layer reshaped by the shape read from the
  checkpoint (the original hard-coded 2048x1001), into `<output>/new.ckpt` with a `checkpoint` file, as the original.
- Object-based checkpoints of earlier versions of this port: restored into a model with the 1x1-conv head and
  written as ours; optimizer slots are not carried over (the output is for export, evaluation or a fresh fine-tune).
The output directory must not exist (the original failed on it too), unless --overwrite (what else it holds is kept,
and named after the write); one a running training holds (its `.run.lock`) is refused. A `labels.txt` beside the
input checkpoint (training copies the dataset's class names there) is copied too, so `predict` on the output still
names classes.
"""
import json
import os
import shutil
import sys

from utils import quiet
from utils.errors import ArgumentParser, UserError, command, doc_part, first_line, on_interrupt, printable
from utils.output_paths import check_output_dir, check_tensorflow_path


def parse_args(argv=None):
    parser = ArgumentParser(description=doc_part(__doc__, 0, "\n"), allow_abbrev=False)
    parser.add_argument("--input", required=True, help="checkpoint prefix (or our model_dir) with a dense classifier")
    parser.add_argument("--dense_layer", default="resnet50/output/dense/kernel",
                        help="TF1 checkpoints: name of the dense kernel variable to reshape (default: the one of the "
                             "checkpoint's architecture)")
    parser.add_argument("--output", default="output_dir",
                        help="output directory (must not exist; default: output_dir in the current directory, as "
                             "the original)")
    parser.add_argument("--overwrite", action="store_true", help="write into an existing output directory")
    quiet.add_verbose_flag(parser)
    args = parser.parse_args(argv)
    from runtime.config import given_options
    args.given = given_options(parser, argv)
    return args


def _check_output(output, overwrite):
    if os.path.exists(output) and not overwrite:
        raise UserError(f"--output {output} already exists; choose another directory or pass --overwrite")
    check_output_dir("--output", output)
    check_tensorflow_path("--output", output)  # (a checkpoint written there could not be read back)


# ---------------------------------------------------------------- name-based checkpoints (ours and the original's)

def convert_named(info, dense_layer, output, given_dense_layer=True, log=print):
    """Copy every tensor, the --dense_layer kernel (and its EMA) reshaped to [1, 1, C, N]; our metadata says final
    conv."""
    import numpy as np
    from model import checkpoint
    from utils.ema import EMA_SUFFIX
    reader = checkpoint.open_reader(info.path)
    shapes = reader.get_variable_to_shape_map()
    if info.arch and (info.format == "named" or not given_dense_layer):
        named = f"{info.arch}/output/dense/kernel"  # the checkpoint's architecture decides its name
        if given_dense_layer and dense_layer != named:
            log(f"Note: --dense_layer {dense_layer} is not used: {info.path} records its architecture, {info.arch}, "
                f"whose classifier kernel is {named}")
        dense_layer = named
    if dense_layer not in shapes:
        candidates = sorted(name for name in shapes if name.endswith("output/dense/kernel"))
        raise UserError(f"--dense_layer {dense_layer} is not in {info.path}"
                        + (f" (it has {', '.join(candidates)})" if candidates else ""))
    if len(shapes[dense_layer]) != 2:
        raise UserError(f"{dense_layer} has shape {shapes[dense_layer]}, not [C, N]: already converted?")
    tensors = {name: checkpoint.read_tensor(reader, name, info.path) for name in shapes
               if name != checkpoint.METADATA_KEY}
    reshaped = []
    for key in (dense_layer, dense_layer + EMA_SUFFIX):  # the kernel and its EMA (--moving_average_decay)
        if key in tensors:
            tensors[key] = np.reshape(tensors[key], [1, 1, *shapes[dense_layer]])
            reshaped.append(key)
    log("Reshaped {} {} -> {} (the 1x1-conv classifier){}".format(
        dense_layer, list(shapes[dense_layer]), [1, 1, *shapes[dense_layer]],
        ", and its EMA" if len(reshaped) > 1 else ""))
    if info.format == "named":
        meta = json.loads(checkpoint.read_tensor(reader, checkpoint.METADATA_KEY, info.path).decode("utf-8"))
        name = f"{checkpoint.CHECKPOINT_PREFIX}-{info.step or 0}"
        meta["use_final_conv"] = True
    else:  # the original's output name, and no metadata: the result stays in the original's format
        name, meta = "new.ckpt", None
    prefix = checkpoint.write(os.path.join(output, name), tensors, meta)
    checkpoint.write_state_file(output, [name])
    return prefix


# ---------------------------------------------------------------- object-based checkpoints of earlier versions

def convert_object(info, output):
    """Restore into a model with the 1x1-conv head (the kernel reshaped; QAT ranges too) and write it in the named
    format as `<output>/model.ckpt-<step>`. Optimizer slots are not carried over: the result is for export and
    evaluation, or a fresh fine-tune (which restarts momentum, as the original's --finetune_checkpoint)."""
    import tensorflow as tf
    from model import checkpoint, resnet
    from model.layers.quantization import QuantizationConfig
    target = resnet.build_model(info.arch, num_classes=info.num_classes, use_final_conv=True,
                                input_normalized=bool(info.input_normalized),
                                quantization=QuantizationConfig() if info.has_quantization_ranges else None)
    checkpoint.restore_model(target, info, info.arch, f"{info.arch} with {info.num_classes} classes")
    kernel = next(variable for variable in target.variables if variable.path.endswith("output/dense/kernel"))
    print("Reshaped {}/output/dense/kernel {} -> {} (the 1x1-conv classifier)".format(
        info.arch, [int(kernel.shape[-2]), int(kernel.shape[-1])], [int(size) for size in kernel.shape]))
    entries = checkpoint.model_entries(target, info.arch)
    entries[checkpoint.GLOBAL_STEP_KEY] = tf.constant(info.step or 0, tf.int64)
    name = f"{checkpoint.CHECKPOINT_PREFIX}-{info.step or 0}"
    meta = checkpoint.metadata(info.arch, info.num_classes, None, True, bool(info.input_normalized))
    prefix = checkpoint.write(os.path.join(output, name), entries, dict(meta, step=info.step or 0))
    checkpoint.write_state_file(output, [name])
    return prefix


def copy_class_names(info, output):
    """The input's `labels.txt` beside the output checkpoint; returns its new path, or None when there is none."""
    source = os.path.join(os.path.dirname(info.path), "labels.txt")
    if not os.path.isfile(source):
        return None
    target = os.path.join(output, "labels.txt")
    if os.path.realpath(source) != os.path.realpath(target):  # --overwrite into the input's own directory
        shutil.copyfile(source, target)
    return target


def others_in(output, written, labels):
    """What --output holds besides this run's checkpoint, its state file, labels.txt and the lock: files of an
    earlier checkpoint or run there (an --overwrite), which the state file no longer names."""
    ours = {"checkpoint", "labels.txt" if labels else None}
    return sorted(name for name in os.listdir(output) if name not in ours and not name.startswith(".")
                  and not name.startswith(os.path.basename(written) + "."))


def convert(args):
    from model import checkpoint
    check_tensorflow_path("--input", args.input)
    info = checkpoint.inspect(checkpoint.find_checkpoint(args.input, "--input"))
    print(f"Read {info.path} ({info.describe()})")
    if "image_size" in info.unrecorded_settings():
        print(f"Note: {info.path} does not record its image size ({info.unrecorded_settings()['image_size']}), so "
              "neither does the checkpoint written: pass --image_size to the tools that read it")
    diverged = checkpoint.divergence_warning(info.diverged, f"checkpoint {info.path}")
    if diverged:  # the converted checkpoint records it too
        print(diverged)
    _check_output(args.output, args.overwrite)
    created = not os.path.exists(args.output)
    from utils.run_lock import RunLock
    try:
        # --output held as a training holds its model_dir: refused (before anything is written) while a run holds
        # it, and no training starts into it while the checkpoint and its state file are written.
        with RunLock(args.output, flag="--output"):
            if info.format == "object":
                written = convert_object(info, args.output)
            else:
                written = convert_named(info, args.dense_layer, args.output,
                                        "dense_layer" in getattr(args, "given", ()))
            return written, copy_class_names(info, args.output)
    except BaseException as error:
        if created:  # nothing half-written is left under the name asked for (a retry needs no --overwrite)
            shutil.rmtree(args.output, ignore_errors=True)
        if isinstance(error, OSError):  # a full disk: the state file, the class names
            raise UserError(f"cannot write --output {args.output}: {first_line(error)}") from None
        raise


@command
def main(argv=None):
    args = parse_args(argv)
    done = []
    # A stop, and stdout's failure at one of the lines (`| head -1`), say whether the checkpoint was written (a stop
    # inside convert removes what it created): a closed pipe otherwise ends a tool silently, status 141.
    with on_interrupt(lambda: (f"the checkpoint was written to {printable(args.output)}; only the lines after it "
                               "are lost") if done else
                      f"no checkpoint was written to --output {printable(args.output)}; run the same command again",
                      closed_stdout=True):
        written, labels = convert(args)
        done.append(written)
        print(f"Wrote {written}")
        others = others_in(args.output, written, labels)
        if others:  # an --overwrite of a directory that held something else: said, not deleted
            print(printable("Note: --output {} also holds what this run did not write ({}{}): not this checkpoint's "
                            "(an evaluation's events in it would be another checkpoint's); remove them if they are "
                            "not wanted".format(args.output, ", ".join(others[:5]),
                                                ", ..." if len(others) > 5 else "")))
        if labels:
            print(f"Copied the class names to {labels}")
        else:
            print("No class names to copy (no labels.txt beside the input checkpoint): predict on the output shows "
                  "class indices, unless given --labels_file or a --data_dir with a labels.txt")
        print("Rewriting checkpoint completed")


if __name__ == "__main__":
    sys.exit(main())
