"""Every export of a model: SavedModel (docs/ORIGINAL.md#savedmodel-export), frozen GraphDef
(docs/ORIGINAL.md#frozen-graph) and ONNX (tf2onnx). main.py, inference.py, export_frozen_graph.py, export_onnx.py
and bench/ call these functions; none of them needs a Runner.

SavedModel: signatures `serving_default` and `predict`, input `input` (float32 [B, S, S, 3] raw pixels), outputs
`classes` (int32) and `probabilities` (float32), as the original's receiver.
Frozen GraphDef: placeholder `input` -> node `<arch>/output/softmax` (float32 probabilities), no variables, and
an unconnected string constant `input_pixels` saying what the input must be: "raw" (0..255 RGB pixels, normalised
in the graph) or "normalized" (`(pixels - mean) / std` per channel, a graph exported with --no_normalization); its
ONNX conversion carries the same fact as metadata `input_pixels`, which inference.py reads.
ONNX: a SavedModel's `serving_default` frozen first (input `input`, outputs `classes` and `probabilities`), or a
frozen GraphDef (input `input`, output `probabilities`). QAT graphs keep their quantisation as
QuantizeLinear/DequantizeLinear pairs (what TensorRT's explicit INT8 mode consumes); tf2onnx cannot convert FakeQuant
ops with a narrow range (symmetric FakeQuant weights), so those graphs are exported with QDQ ops.
"""

import contextlib
import errno
import glob
import json
import os
import shutil
import time
import uuid

from utils.dataset_manifest import leaves_outputs_unnamed
from utils.errors import UserError, first_line, on_interrupt, printable
from utils.output_paths import earlier_file_kept, replaced_path
from utils.run_lock import missing_directories

DEFAULT_OPSET = 17


# ------------------------------------------------------------------ SavedModel

SOURCE_FILE = os.path.join("assets.extra", "source.json")  # beside the SavedModel's own files, which TF ignores
# A SavedModel is written as `<export_dir>/.tmp-<stamp>-<random>` and renamed to `<stamp>` once complete.
SAVED_MODEL_TEMPORARY_PREFIX = ".tmp-"


def save_saved_model(model, image_size, export_dir, source=None):
    """Writes `model` as a SavedModel in a new timestamped subdirectory of `export_dir` and returns its path.
    It is written under a temporary name first, so an interrupted export never leaves a half SavedModel under the
    final name. `source`: what the model is (architecture, classes, size, the checkpoint and step its weights came
    from, which weights), written to `assets.extra/source.json` for the tools that serve it to say (read_source)."""
    import tensorflow as tf
    module = tf.Module()
    # The module tracks the tf.Variables behind the Keras variables, not the Keras model: TensorFlow Lite's
    # converter freezes only plain resource variables into constants and leaves Keras' wrappers as uninitialised
    # variables, which compute NaN (tests/test_export.py). tf.saved_model.load and tf2onnx read either form.
    module.model_variables = [_resource_variable(variable) for variable in model.variables]

    from model.resnet import on_raw_pixels
    raw = on_raw_pixels(model)  # the signature takes raw pixels, also from a model built for DALI's input

    @tf.function(input_signature=[tf.TensorSpec([None, image_size, image_size, 3], tf.float32, name="input")])
    def serve(input):  # noqa: A002 - the signature's input key is "input", as the original's receiver
        logits = tf.cast(raw(input, training=False), tf.float32)
        return {"classes": tf.argmax(logits, axis=1, output_type=tf.int32),
                "probabilities": tf.nn.softmax(logits)}

    module.serve = serve
    stamp = int(time.time())
    created = missing_directories(export_dir)  # what makedirs below creates, removed again if nothing is written
    temporary = None
    try:
        with on_interrupt("no SavedModel written (its temporary directory is removed)"):
            os.makedirs(export_dir, exist_ok=True)
            # The temporary directory is this export's alone (a random name, created exclusively, under the umask):
            # two exports into one --export_dir in the same second shared `.tmp-<stamp>` and wrote their files
            # into each other's.
            path = os.path.join(export_dir, "{}{}-{}".format(SAVED_MODEL_TEMPORARY_PREFIX, stamp, uuid.uuid4().hex))
            os.mkdir(path)
            temporary = path
            tf.saved_model.save(module, temporary, signatures={"serving_default": serve, "predict": serve})
            if source is not None:
                os.makedirs(os.path.join(temporary, os.path.dirname(SOURCE_FILE)), exist_ok=True)
                with open(os.path.join(temporary, SOURCE_FILE), "w", encoding="utf-8") as handle:
                    json.dump(dict(source, image_size=image_size), handle, sort_keys=True)
            final = _claim_stamp(temporary, export_dir, stamp)
    except (OSError, tf.errors.OpError) as error:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
        _remove_empty(created)
        raise UserError("cannot write the SavedModel under {}: {}".format(export_dir, first_line(error))) from None
    except BaseException:  # an interrupt, or a bug: no half-written directory is left either way
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
        _remove_empty(created)
        raise
    return final


def _claim_stamp(temporary, export_dir, stamp):
    """Renames the complete export `temporary` to `<export_dir>/<stamp>`, or to the next free second when another
    export holds that name (as TF1's export did): a rename onto an existing non-empty directory fails, so two
    exports of the same second never end in one directory. Returns the final path."""
    while True:
        final = os.path.join(export_dir, str(stamp))
        if not os.path.exists(final):
            try:
                os.rename(temporary, final)
                return final
            except OSError as error:
                if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
        stamp += 1


def _remove_empty(created):
    """Removes the directories of `created` (deepest first) this run made, while they are empty: a failed or
    interrupted export leaves no empty --export_dir behind, and never touches one that existed before or holds
    anything (os.rmdir refuses a directory that is not empty)."""
    for path in created:
        try:
            os.rmdir(path)
        except OSError:
            return


def read_source(saved_model_dir):
    """The `source` a SavedModel was written with (save_saved_model), or None (an export of an earlier version, or
    not ours); a UserError naming the file and the field when it holds what no export writes."""
    path = os.path.join(saved_model_dir, SOURCE_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:  # (a directory, unreadable, not UTF-8)
        raise UserError(f"cannot read the export record {printable(path, 300)} ({first_line(error)})") from None
    return checked_source(text, f"export record {printable(path, 300)}")


def _source_fields():
    """What each field of an export record may hold (source_record writes them); None (absent) is always allowed.
    The checks of a checkpoint's metadata where the two share a field."""
    from model.checkpoint.read import _METADATA_FIELDS, _SWITCH, _integer
    return {"arch": _METADATA_FIELDS["arch"], "num_classes": _METADATA_FIELDS["num_classes"],
            "image_size": _METADATA_FIELDS["image_size"], "diverged": _METADATA_FIELDS["diverged"],
            "checkpoint": (lambda value: isinstance(value, str), "a path"), "step": _integer(0, 2 ** 62),
            "weights": (lambda value: value in ("fresh", "raw", "ema"), '"fresh", "raw" or "ema"'),
            "class_names": (lambda value: isinstance(value, list) and all(isinstance(name, str) for name in value),
                            "a list of class names"),
            "quantized": _SWITCH, "symmetric": _SWITCH, "use_qdq": _SWITCH, "unused_quantization_ranges": _SWITCH,
            "untrained_quantization_ranges": _SWITCH, "checkpoint_has_ema": _SWITCH}


def checked_source(text, where):
    """The export record `text` (JSON; None or "" when there is none) parsed: a dict whose fields each hold what
    source_record writes there, else a UserError naming `where` and the first field that does not (its value
    quoted printable and cut short). A record is text anyone can edit beside the model, or damage."""
    if not text:
        return None
    def damaged(what):
        return UserError(f"{where}: {what}: it is no export record of this port as written; export the model again")
    try:
        source = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise damaged(f"not JSON ({first_line(error)[:100]})") from None
    if not isinstance(source, dict):
        raise damaged("not a JSON object")
    for name, (valid, expected) in _source_fields().items():
        value = source.get(name)
        if value is not None and not valid(value):
            raise damaged(f'field "{name}" is {printable(json.dumps(value), 80)}, not {expected}')
    return source


def source_record(arch, num_classes, info, ema, class_names=None, **extra):
    """What an export is, for its record (save_saved_model's source.json, a frozen graph's SOURCE_NODE): the
    architecture, classes, the checkpoint (model/checkpoint.CheckpointInfo, None for fresh weights) and step its
    weights came from and which weights (`ema`: its EMA ones), the divergence its training was seen in, the
    `class_names` of its outputs when known (output k is class_names[k]), plus `extra` facts (a frozen graph's
    quantisation)."""
    # the checkpoint's absolute path: the record is read from anywhere (inference.py in another directory), where a
    # path as typed would name another checkpoint, or none
    record = {"arch": arch, "num_classes": num_classes,
              "checkpoint": os.path.abspath(info.path) if info is not None else None,
              "step": info.step if info is not None else None,
              "weights": "fresh" if info is None else "ema" if ema else "raw"}
    if info is not None and info.diverged:
        record["diverged"] = dict(info.diverged)
    if info is not None and not ema and info.has_weight_averages:  # (so "the weights" is not taken for its EMA ones)
        record["checkpoint_has_ema"] = True
    if class_names:
        record["class_names"] = list(class_names)
    return dict(record, **extra)


def agreeing_source(source, where, image_size=None, num_classes=None, warn=print,
                   ignored="the model is described from its graph alone", quantized=None, arch=None):
    """`source` (an export's record, read from `where`: a SavedModel's source.json, a frozen graph's SOURCE_NODE, an
    ONNX model's metadata) when it agrees with the graph it describes: its image_size and num_classes with the
    graph's input size `image_size` and output count `num_classes` (None where the graph does not say), its
    class_names no more than the outputs (output k is name k; a model trained with more outputs than its dataset
    has classes, the original's 1001 for ImageNet's 1000 or a fine-tune at --num_classes K + 1, names the first
    ones, as runner_utils.class_names_for_export records them), its `quantized` with whether the graph holds
    fake-quantisation ops (`quantized`), its arch with the architecture the graph's node names are scoped by
    (`arch`: graph_architecture; None where they name none); graph_facts and onnx_facts give both, None where not
    known. Its checkpoint and step cannot be told from a graph and are taken as recorded. A record that contradicts its graph is another
    model's (copied or swapped beside it): all it says (architecture, checkpoint, step, class names) would be false
    of this model, so it is refused whole, with one WARNING line through `warn` naming `where` and the fields, and
    None is returned: the caller goes on with what the graph says (its input size and classes), which is enough to
    serve it."""
    if source is None:
        return None
    contradictions = [f"{field} {source[field]!r} (the graph's: {actual})"
                      for field, actual in (("image_size", image_size), ("num_classes", num_classes))
                      if actual is not None and source.get(field) is not None and source[field] != actual]
    if arch is not None and source.get("arch") is not None and source["arch"] != arch:
        contradictions.insert(0, f"arch {source['arch']!r} (the graph's: {arch})")
    if quantized is not None and bool(source.get("quantized")) != quantized:
        contradictions.append("quantized {} (the graph has {}fake-quantisation ops)".format(
            bool(source.get("quantized")), "" if quantized else "no "))
    names = source.get("class_names")
    outputs = num_classes if num_classes is not None else source.get("num_classes")
    if names is not None and (not isinstance(names, list) or (outputs is not None and len(names) > outputs)):
        contradictions.append("class_names ({} names for {} outputs)".format(
            len(names) if isinstance(names, list) else "not a list of", outputs))
    if not contradictions:
        return source
    warn(printable("WARNING: {} is not this model's record: its {} contradict{} the model's graph; it is ignored "
                   "(another model's, copied beside it?): {}".format(
                       where, ", ".join(contradictions), "" if len(contradictions) > 1 else "s", ignored))[:1000])
    return None


def describe_source(source):
    """"resnet50, 10 classes ("T-shirt/top", "Trouser", "Pullover", ...), 40x40, the EMA weights of checkpoint <path>
    (step 1124)": a model's `source` in words (the first class names when it records them)."""
    weights = source.get("weights")
    origin = ("freshly initialised weights" if weights == "fresh" or not source.get("checkpoint") else
              "the {}weights of checkpoint {} (step {}{})".format(
                  "EMA " if weights == "ema" else "raw " if source.get("checkpoint_has_ema") else "",
                  source["checkpoint"], source.get("step"),
                  "; it also holds EMA weights" if source.get("checkpoint_has_ema") else ""))
    names = source.get("class_names") or []
    outputs = source.get("num_classes")
    # (fewer names than outputs less the original's last one: said, as "10 classes (...)" reads as ten names)
    few = "{} named: ".format(len(names)) if isinstance(outputs, int) and leaves_outputs_unnamed(len(names),
                                                                                                  outputs) else ""
    named = " ({}{}{})".format(few, ", ".join('"{}"'.format(name) for name in names[:3]),
                               ", ..." if len(names) > 3 else "") if names else ""
    # a record is read from the export's own files: what it holds reaches the terminal escaped, and shortened
    return printable("{}, {} classes{}, {size}x{size}, {}{}".format(
        source.get("arch"), source.get("num_classes"), named, origin,
        ", quantisation-aware (fake-quantised{}{}{})".format(
            ", symmetric" if source.get("symmetric") else "",
            ", QuantizeAndDequantize" if source.get("use_qdq") else "",
            ", its activation ranges untrained: a float checkpoint's, at their initial [-6, 6]"
            if source.get("untrained_quantization_ranges") else "")
        if source.get("quantized") else ", the float model of a quantisation-aware checkpoint (its ranges unused)"
        if source.get("unused_quantization_ranges") else "", size=source.get("image_size")))[:1000]


def _resource_variable(variable):
    """The tf.Variable that holds a Keras variable's value."""
    import tensorflow as tf
    value = getattr(variable, "value", variable)
    if not isinstance(value, tf.Variable):
        raise TypeError(f"{variable.path if hasattr(variable, 'path') else variable} is not backed by a tf.Variable "
                        f"({type(value).__name__})")
    return value


def load_serving_signature(saved_model_dir):
    """(loaded object, its `serving_default` concrete function) of a SavedModel; UserError if absent or unreadable."""
    import tensorflow as tf
    if not os.path.isdir(saved_model_dir) or not tf.saved_model.contains_saved_model(saved_model_dir):
        raise UserError(f"{saved_model_dir} is not a SavedModel directory (expected saved_model.pb inside; "
                        f"{_what_to_pass_instead(saved_model_dir)})")
    loaded = tf.saved_model.load(saved_model_dir)
    signature = loaded.signatures.get("serving_default")
    if signature is None:
        raise UserError(f"SavedModel {saved_model_dir} has no serving_default signature "
                        f"(signatures: {', '.join(loaded.signatures) or 'none'})")
    return loaded, signature


def checkpoint_prefix_hint(flag, path):
    """The UserError of a tool that serves or converts exported models when `path` is a training checkpoint (a
    prefix whose .index is on disk), else None: how to export it first, from that very checkpoint."""
    if os.path.exists(path) or not os.path.isfile(path + ".index"):
        return None
    return UserError(f"{flag} {path} is a training checkpoint, not an exported model: export it first, e.g. python "
                     f"export_frozen_graph.py --checkpoint {path} --output_file <name>.pb, then "
                     f"python export_onnx.py --input <name>.pb --output <name>.onnx")


def exports_in(path):
    """The names of the SavedModels a directory holds as main.py's --export_dir writes them (timestamped
    subdirectories), oldest first; [] for anything else. An interrupted export's temporary is none."""
    if not os.path.isdir(path):
        return []
    try:
        names = os.listdir(path)
    except OSError:
        return []
    return sorted(name for name in names if not name.startswith(SAVED_MODEL_TEMPORARY_PREFIX)
                  and os.path.isfile(os.path.join(path, name, "saved_model.pb")))


class ExportGiven:
    """An export given where a training checkpoint is expected (`as_export`): `what` it is, as a phrase
    ("a SavedModel (an export)", "an --export_dir holding 2 SavedModels (exports), the newest <dir>/<ts>"),
    the SavedModel to serve, and the directory of the checkpoint its record says it was exported from (or None)."""

    def __init__(self, what, saved_model, checkpoint_dir):
        self.what, self.saved_model, self.checkpoint_dir = what, saved_model, checkpoint_dir


def as_export(path):
    """An ExportGiven when `path` is a SavedModel or a directory of them (main.py's --export_dir), else None: the one
    reading of an export given to a tool that wants a checkpoint (main.py's --model_dir, --finetune_checkpoint,
    export_frozen_graph.py's --checkpoint, postprocess_ckpt.py's --input)."""
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        saved_model, what = path, "a SavedModel (an export)"
    else:
        exports = exports_in(path)
        if not exports:
            return None
        saved_model = os.path.join(path, exports[-1])
        what = ("an --export_dir holding {}, the newest {}".format(
            "1 SavedModel (an export)" if len(exports) == 1 else f"{len(exports)} SavedModels (exports)", saved_model))
    try:
        exported_from = (read_source(saved_model) or {}).get("checkpoint")
    except UserError:  # a damaged record: the hint goes without it
        exported_from = None
    return ExportGiven(what, saved_model, os.path.dirname(exported_from) if exported_from else None)


def _what_to_pass_instead(path):
    """The hint of a path that is not a SavedModel: the newest export under an --export_dir, or how to export a
    training directory's checkpoint (with the evaluation data, or without any through a frozen graph)."""
    if os.path.isdir(path):
        exports = exports_in(path)
        if exports:
            return "it holds {} export(s): pass one, e.g. {}".format(len(exports), os.path.join(path, exports[-1]))
        if os.path.isfile(os.path.join(path, "checkpoint")) or glob.glob(
                os.path.join(glob.escape(path), "model.ckpt-*.index")):
            return ("it is a training directory: export its checkpoint with main.py --mode evaluate --model_dir {0} "
                    "--data_dir <TFRecords> --export_dir <dir>, then pass <dir>/<timestamp>; or, with no data, "
                    "python export_frozen_graph.py --checkpoint {0} --output_file <name>.pb, then python "
                    "export_onnx.py --input <name>.pb --output <name>.onnx, and pass <name>.onnx to inference.py "
                    "--backend onnxruntime".format(path))
    return "pass the timestamped subdirectory of main.py's --export_dir"


# ------------------------------------------------------------------ frozen GraphDef

def output_node_name(arch):
    return f"{arch}/output/softmax"


INPUT_PIXELS = "input_pixels"  # the marker node of a frozen graph and the metadata key of an ONNX model
RAW, NORMALIZED = "raw", "normalized"


def describe_input_pixels(value):
    """What a model's `input_pixels` fact asks of its callers, in words."""
    return {RAW: "raw 0..255 RGB pixels (normalised in the model)",
            NORMALIZED: "normalised pixels, (pixels - mean) / std per RGB channel"}.get(value, f"unknown ({value!r})")


# The marker node of a frozen graph that records what it is (a SavedModel's source.json; the ONNX metadata `source`).
SOURCE_NODE = "export_source"


def _add_marker(graph_def, name, value):
    """A string constant `name` holding `value`, connected to nothing: a fact the graph's readers look up."""
    from tensorflow.core.framework import types_pb2
    node = graph_def.node.add(name=name, op="Const")
    node.attr["dtype"].type = types_pb2.DT_STRING
    node.attr["value"].tensor.dtype = types_pb2.DT_STRING
    node.attr["value"].tensor.string_val.append(value.encode())


def _marker(graph_def, name):
    for node in graph_def.node:
        if node.name == name and node.op == "Const" and node.attr["value"].tensor.string_val:
            return node.attr["value"].tensor.string_val[0].decode()
    return None


def graph_input_pixels(graph_def):
    """A frozen graph's `input_pixels` fact ("raw" or "normalized"), or None when it records none (a graph of the
    original's export_frozen_graph.py, or of an earlier version of this one)."""
    return _marker(graph_def, INPUT_PIXELS)


def graph_source(graph_def, where="the frozen graph"):
    """What a frozen graph of ours records it is (`source`, as a SavedModel's source.json), or None (graphs written
    before 2026-12-05, the original's); a UserError naming `where` (its file) and the field of a damaged record."""
    return checked_source(_marker(graph_def, SOURCE_NODE), f"the export record of {where} (its {SOURCE_NODE} node)")


def probabilities_function(model, arch, image_size, input_format="NHWC", batch_size=None):
    """tf.function: images in `input_format` -> softmax probabilities (inference call), its output op named
    `<arch>/output/softmax`."""
    import tensorflow as tf
    shape = [batch_size, 3, image_size, image_size] if input_format == "NCHW" else \
        [batch_size, image_size, image_size, 3]

    @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32, name="input")])
    def probabilities(images):
        if input_format == "NCHW":
            images = tf.transpose(images, [0, 2, 3, 1])
        logits = tf.cast(model(images, training=False), tf.float32)
        return tf.nn.softmax(logits)

    return probabilities


def freeze(concrete_function, output_name=None):
    """GraphDef with every variable turned into a constant; the single output node renamed to `output_name`."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
    frozen = convert_variables_to_constants_v2(concrete_function)
    graph_def = frozen.graph.as_graph_def()
    if output_name:
        outputs = [tensor.name.split(":")[0] for tensor in frozen.outputs]
        if len(outputs) != 1:
            raise ValueError(f"expected one output, got {outputs}")
        consumers = [node for node in graph_def.node if any(i.split(":")[0].lstrip("^") == outputs[0]
                                                               for i in node.input)]
        if consumers:
            raise ValueError(f"output node {outputs[0]} has consumers")
        for node in graph_def.node:
            if node.name == outputs[0]:
                node.name = output_name
    if any(node.op in ("VarHandleOp", "VariableV2", "ReadVariableOp") for node in graph_def.node):
        raise AssertionError("frozen graph still has variables")
    return graph_def


def frozen_graph(model, arch, image_size, input_format="NHWC", batch_size=None, source=None):
    """The frozen GraphDef of `model`'s probabilities (placeholder `input` -> `<arch>/output/softmax`), marked with
    what its input must be (`input_pixels`): a model built with `input_normalized=True` takes normalised pixels;
    and with `source` (as save_saved_model's), what it is, for its ONNX conversion to carry."""
    function = probabilities_function(model, arch, image_size, input_format, batch_size)
    graph_def = freeze(function.get_concrete_function(), output_node_name(arch))
    _add_marker(graph_def, INPUT_PIXELS, NORMALIZED if getattr(model, "input_normalized", False) else RAW)
    if source is not None:
        _add_marker(graph_def, SOURCE_NODE, json.dumps(dict(source, image_size=image_size), sort_keys=True))
    return graph_def


def write_graph_def(graph_def, path, as_text):
    """Writes `graph_def` (binary, or text with `as_text`) to `path` atomically (see `_write_atomically`)."""
    import tensorflow as tf
    _write_atomically(path, lambda temporary: tf.io.write_graph(graph_def, os.path.dirname(temporary),
                                                                os.path.basename(temporary), as_text=as_text))


def _write_atomically(path, write):
    """Calls `write(temporary)` for a new file `<path>.tmp-<random hex>` beside `path`, then renames it to `path`
    (utils/output_paths.replaced_path), so that `path` is either absent (or its previous version) or complete. On
    any exception, an interrupt (KeyboardInterrupt, utils.errors.Terminated) included, the temporary file is removed
    and the exception goes on; an interrupt's line then says that no output was written, a write that fails is one
    UserError. Only `kill -9` or a power loss can leave a `*.tmp-*` file behind."""
    import tensorflow as tf
    temporary = "{}.tmp-{}".format(os.path.abspath(path), uuid.uuid4().hex)
    try:
        with on_interrupt(lambda: "no output written to {}{}".format(path, earlier_file_kept(path))), \
                replaced_path(path, temporary):
            os.makedirs(os.path.dirname(temporary), exist_ok=True)
            write(temporary)
    except tf.errors.OpError as error:  # a full disk, a read-only or vanished directory, as TensorFlow reports it
        raise UserError("cannot write {}: {}".format(path, first_line(error))) from None


def load_graph_def(path):
    """A GraphDef from a binary or text file; UserError if it is neither."""
    import tensorflow as tf
    graph_def = tf.compat.v1.GraphDef()
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        graph_def.ParseFromString(data)
    except Exception:  # noqa: BLE001 - protobuf raises DecodeError; fall back to the text format
        from google.protobuf import text_format
        try:
            text_format.Parse(data.decode("utf-8"), graph_def)
        except Exception as error:  # noqa: BLE001
            raise UserError(f"{path} is not a GraphDef (binary or text): {str(error)[:200]}") from None
    return graph_def


def graph_def_io(graph_def):
    """(input names, output names) of a frozen graph: placeholders, and nodes no other node consumes."""
    consumed = {name.split(":")[0].lstrip("^") for node in graph_def.node for name in node.input}
    inputs = [node.name for node in graph_def.node if node.op == "Placeholder"]
    outputs = [node.name for node in graph_def.node if node.name not in consumed and node.op not in ("Const", "NoOp")
               and node.op != "Placeholder"]
    return inputs, outputs


# ------------------------------------------------------------------ ONNX

def fuse_grouped_convs(graph_def):
    """`graph_def` with each per-group convolution (model/layers/grouped_conv.py "per_group_conv": the input and the
    HWIO kernel each split into G parts, G `Conv2D`s, their outputs concatenated along the channels) replaced by
    one grouped `Conv2D` of the whole input and kernel: the same function (a grouped convolution is defined as
    those G convolutions side by side), which tf2onnx converts into one ONNX `Conv` with `group` G. Only for
    conversion: TensorFlow's CPU kernels cannot run a grouped `Conv2D` once Grappler fuses it with its BN/ReLU.
    Returns (the new GraphDef, the number of convolutions fused)."""
    from tensorflow.core.framework import graph_pb2, node_def_pb2
    nodes = {node.name: node for node in graph_def.node}
    consumers = {}
    for node in graph_def.node:
        for name in node.input:
            consumers.setdefault(name.split(":")[0].lstrip("^"), []).append(node.name)

    def source(name):  # (node name, output index) of an input
        node, _, index = name.partition(":")
        return node, int(index or 0)

    def axis(name):  # the 4-D axis a Const input names (-1 is 3), or None
        node = nodes.get(source(name)[0])
        if node is None or node.op != "Const":
            return None
        from tensorflow.python.framework import tensor_util
        value = tensor_util.MakeNdarray(node.attr["value"].tensor).tolist()
        return value % 4 if isinstance(value, int) else None

    def channel_axis(conv):
        return 1 if conv.attr["data_format"].s == b"NCHW" else 3

    replaced = {}
    for concat in graph_def.node:
        if concat.op != "ConcatV2" or concat.attr["N"].i < 2:
            continue
        parts = list(concat.input[:concat.attr["N"].i])
        convs = [nodes.get(source(name)[0]) for name in parts]
        if any(conv is None or conv.op != "Conv2D" or source(name)[1] != 0 or len(consumers.get(conv.name, [])) != 1
               for conv, name in zip(convs, parts)):
            continue
        x_split, k_split = (nodes.get(source(convs[0].input[i])[0]) for i in (0, 1))
        groups = len(convs)
        if x_split is None or k_split is None or x_split.op != "Split" or k_split.op != "Split" or \
                x_split.attr["num_split"].i != groups or k_split.attr["num_split"].i != groups:
            continue
        channels = channel_axis(convs[0])
        same = all(source(conv.input[0]) == (x_split.name, i) and source(conv.input[1]) == (k_split.name, i)
                   and len(conv.input) == 2 and conv.attr == convs[0].attr for i, conv in enumerate(convs))
        if not (same and axis(x_split.input[0]) == channels and axis(k_split.input[0]) == 3
                and axis(concat.input[-1]) == channels):
            continue
        fused = node_def_pb2.NodeDef(name=concat.name, op="Conv2D", input=[x_split.input[1], k_split.input[1]])
        for key, value in convs[0].attr.items():
            fused.attr[key].CopyFrom(value)
        replaced[concat.name] = fused
    if not replaced:
        return graph_def, 0
    result = graph_pb2.GraphDef()
    result.CopyFrom(graph_def)
    del result.node[:]
    for node in graph_def.node:
        result.node.append(replaced.get(node.name, node))
    return result, len(replaced)  # (the splits and per-group convs left unused are pruned by tf2onnx)


def saved_model_to_onnx(saved_model_dir, output_path, opset=DEFAULT_OPSET, warn=print):
    import tf2onnx
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
    _, signature = load_serving_signature(saved_model_dir)
    source = read_source(saved_model_dir)  # a damaged record is refused before the (slow) conversion
    frozen = convert_variables_to_constants_v2(signature)
    input_names = [tensor.name for tensor in frozen.inputs]
    output_names = [tensor.name for tensor in frozen.outputs]
    # Name the ONNX outputs after the signature keys (classes, probabilities).
    keys = sorted(signature.structured_outputs)  # the flattening order of a dict of outputs
    by_tensor = {tensor.name: key for key, tensor in zip(keys, frozen.outputs)}
    with _tf2onnx_conversion():
        model_proto, _ = tf2onnx.convert.from_graph_def(
            fuse_grouped_convs(frozen.graph.as_graph_def())[0], input_names=input_names, output_names=output_names,
            opset=opset)
    _rename_io(model_proto, input_names, ["input"], output_names,
               [by_tensor.get(name, name.split(":")[0]) for name in output_names])
    _set_metadata(model_proto, INPUT_PIXELS, RAW)  # a serving signature takes raw pixels (save_saved_model)
    source = agreeing_source(source, os.path.join(saved_model_dir, SOURCE_FILE),
                             *onnx_image_size_and_classes(model_proto), warn=warn, ignored=NOT_CARRIED,
                             **onnx_facts(model_proto))
    if source is not None:
        _set_metadata(model_proto, SOURCE_KEY, json.dumps(source, sort_keys=True))
    _save_onnx(model_proto, output_path)
    return model_proto


def frozen_graph_to_onnx(graph_def_path, output_path, opset=DEFAULT_OPSET, warn=print):
    import tf2onnx
    graph_def = load_graph_def(graph_def_path)
    inputs, outputs = graph_def_io(graph_def)
    if len(inputs) != 1 or len(outputs) != 1:
        raise UserError(f"{graph_def_path}: expected one placeholder and one output, got {inputs} -> {outputs}")
    input_names, output_names = [inputs[0] + ":0"], [outputs[0] + ":0"]
    source = graph_source(graph_def, printable(graph_def_path, 300))  # refused before the (slow) conversion
    try:
        with _tf2onnx_conversion():
            model_proto, _ = tf2onnx.convert.from_graph_def(fuse_grouped_convs(graph_def)[0], input_names=input_names,
                                                            output_names=output_names, opset=opset)
    except Exception as error:  # noqa: BLE001 - tf2onnx raises plain exceptions for unsupported ops
        message = first_line(error)
        if "narrow_range" in message:
            message += " (symmetric FakeQuant weights: export the frozen graph with --use_qdq)"
        raise UserError(f"tf2onnx cannot convert {graph_def_path}: {message[:300]}") from None
    _rename_io(model_proto, input_names, ["input"], output_names, ["probabilities"])
    pixels = graph_input_pixels(graph_def)
    if pixels is not None:
        _set_metadata(model_proto, INPUT_PIXELS, pixels)
    source = agreeing_source(source, f"{graph_def_path}'s node {SOURCE_NODE}",
                             *onnx_image_size_and_classes(model_proto), warn=warn, ignored=NOT_CARRIED,
                             **graph_facts(graph_def))
    if source is not None:
        _set_metadata(model_proto, SOURCE_KEY, json.dumps(source, sort_keys=True))
    _save_onnx(model_proto, output_path)
    return model_proto


NOT_CARRIED = "it is not carried into the ONNX model's metadata, which records no architecture or checkpoint"


def to_onnx(input_path, output_path, opset=DEFAULT_OPSET, warn=print):
    """A SavedModel directory or a frozen GraphDef file -> ONNX model written to `output_path`; returns it. Its
    record (`source`) is carried into the metadata when it agrees with the graph (agreeing_source; else `warn`)."""
    if not os.path.exists(input_path):
        raise checkpoint_prefix_hint("--input", input_path) or UserError(f"--input {input_path} does not exist")
    if os.path.isdir(input_path):
        return saved_model_to_onnx(input_path, output_path, opset, warn)
    return frozen_graph_to_onnx(input_path, output_path, opset, warn)


@contextlib.contextmanager
def _tf2onnx_conversion():
    """The conditions of a tf2onnx conversion. tf2onnx calls TF's v1 graph utilities, and TF prints a deprecation
    notice for each (nothing a user of the export can act on); TF's own switch turns them off. Its ONNX optimizers
    each work on a deep copy of the whole graph, weights included, and the copies left behind are reference
    cycles: Python's collector, counting objects rather than bytes, let them pile up (gigabytes for ResNeXt101), so
    a full collection runs before each optimizer. The objects that were there before the conversion (TensorFlow's
    and Keras' millions) are frozen out of those collections meanwhile, which would otherwise walk them each time
    (docs/PERFORMANCE.md, Grouped convolution)."""
    import gc
    from tensorflow.python.util import deprecation
    from tf2onnx import optimizer

    def collecting(factory):
        def make():
            gc.collect()
            return factory()
        return make

    registry = optimizer._optimizers  # (the pinned tf2onnx's: requirements.txt)
    saved = dict(registry)
    registry.update({name: collecting(factory) for name, factory in saved.items()})
    gc.freeze()
    try:
        with deprecation.silence():
            yield
    finally:
        gc.unfreeze()
        registry.update(saved)


# The ops a quantisation-aware graph computes its fake quantisation with: TensorFlow's (FakeQuant, and
# QuantizeAndDequantize with --use_qdq) and, in ONNX, the QuantizeLinear/DequantizeLinear pairs tf2onnx makes of them.
QUANTIZATION_OPS = frozenset({"FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxVarsPerChannel", "FakeQuantWithMinMaxArgs",
                              "QuantizeAndDequantizeV2", "QuantizeAndDequantizeV3", "QuantizeAndDequantizeV4"})
ONNX_QUANTIZATION_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})


def graph_architecture(node_names):
    """The architecture whose Keras model scopes a graph's nodes (`resnet50/...`, `resnet50_1/...`,
    `StatefulPartitionedCall/resnet50_1/...`: the model is named after --arch, model/resnet.build_model), from the
    names of a TF graph's nodes (graph_node_names) or an ONNX model's (onnx_node_names); None when they name no one
    architecture (the original's graphs, another tool's)."""
    import re
    from model.arch_names import ARCH_NAMES
    pattern = re.compile(r"({})(?:_\d+)?$".format("|".join(re.escape(name) for name in ARCH_NAMES)))
    found = set()
    for name in node_names:  # (a scope anywhere above the node: ONNX conversions prefix StatefulPartitionedCall/)
        for scope in name.split("/")[:-1]:
            match = pattern.match(scope)
            if match:
                found.add(match.group(1))
                break
    return found.pop() if len(found) == 1 else None


def graph_nodes(graph_def):
    """The nodes of a TF graph, its functions' included."""
    return list(graph_def.node) + [node for function in graph_def.library.function for node in function.node_def]


def graph_node_names(graph_def):
    return [node.name for node in graph_nodes(graph_def)]


def graph_quantized(graph_def):
    """Whether a TF graph (its functions included) computes fake quantisation."""
    return any(node.op in QUANTIZATION_OPS for node in graph_nodes(graph_def))


def onnx_node_names(model_proto):
    return [node.name for node in model_proto.graph.node]


def onnx_quantized(model_proto):
    """Whether an ONNX graph computes quantisation (QuantizeLinear/DequantizeLinear)."""
    return any(node.op_type in ONNX_QUANTIZATION_OPS for node in model_proto.graph.node)


def graph_facts(graph_def):
    """What an export record is held to in a TF graph (agreeing_source's `quantized` and `arch`)."""
    return {"quantized": graph_quantized(graph_def), "arch": graph_architecture(graph_node_names(graph_def))}


def onnx_facts(model_proto):
    """What an export record is held to in an ONNX model (agreeing_source's `quantized` and `arch`)."""
    return {"quantized": onnx_quantized(model_proto), "arch": graph_architecture(onnx_node_names(model_proto))}


def saved_model_graph(saved_model_dir):
    """The GraphDef of a SavedModel's (first) MetaGraph, read from its saved_model.pb without loading it; None when
    it cannot be read (the loader says why)."""
    from tensorflow.core.protobuf import saved_model_pb2
    saved_model = saved_model_pb2.SavedModel()
    try:
        with open(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as handle:
            saved_model.ParseFromString(handle.read())
    except (OSError, ValueError, RuntimeError):  # (protobuf's DecodeError is a ValueError)
        return None
    return saved_model.meta_graphs[0].graph_def if saved_model.meta_graphs else None


def graph_precision(graph_def):
    """"bfloat16", "float16" or "float32": what a TF graph's convolutions and matmuls compute in (its functions
    included), so a SavedModel exported under --amp can say so."""
    from tensorflow.core.framework import types_pb2
    names = {types_pb2.DT_BFLOAT16: "bfloat16", types_pb2.DT_HALF: "float16"}
    found = {names[node.attr["T"].type] for node in graph_nodes(graph_def)
             if node.op in ("Conv2D", "MatMul", "BatchMatMulV2", "Einsum") and node.attr["T"].type in names}
    return " and ".join(sorted(found)) or "float32"


def onnx_reduced_precision(model_proto):
    """The reduced float types ("bfloat16", "float16") an ONNX graph computes in, read from its Cast targets and
    initialisers: a SavedModel exported under --amp casts its float32 weights and input in the graph."""
    import onnx
    reduced = {onnx.TensorProto.BFLOAT16: "bfloat16", onnx.TensorProto.FLOAT16: "float16"}
    types = {initializer.data_type for initializer in model_proto.graph.initializer}
    for node in model_proto.graph.node:
        if node.op_type == "Cast":
            types.update(attribute.i for attribute in node.attribute if attribute.name == "to")
    return sorted(reduced[kind] for kind in types if kind in reduced)


def onnx_signature(model_proto):
    """"'input' [-1, 40, 40, 3] -> 'classes' [-1], 'probabilities' [-1, 10]": an ONNX graph's inputs and outputs
    with their shapes (-1 for a dynamic dimension), so a conversion's log says what model it wrote."""
    def described(values):
        return ", ".join("'{}' [{}]".format(value.name, ", ".join(
            str(dim.dim_value) if dim.HasField("dim_value") else "-1" for dim in value.type.tensor_type.shape.dim))
            for value in values)
    return "{} -> {}".format(described(model_proto.graph.input), described(model_proto.graph.output))


SOURCE_KEY = "source"  # the ONNX metadata key of a SavedModel's source.json or a frozen graph's SOURCE_NODE


def _metadata(model_proto, key):
    """The value of an ONNX model's metadata entry `key`, or None."""
    return next((prop.value for prop in model_proto.metadata_props if prop.key == key), None)


def _set_metadata(model_proto, key, value):
    entry = next((prop for prop in model_proto.metadata_props if prop.key == key), None) or \
        model_proto.metadata_props.add(key=key)
    entry.value = value


def onnx_input_layout(shape):
    """("NHWC" or "NCHW", side or None) of an ONNX model's `input` shape (ints, or names for dynamic dims):
    export_frozen_graph.py writes NCHW graphs by default (TensorRT's layout), main.py's SavedModels take NHWC.
    (None, None) when the shape is not an image batch with 3 channels on either side."""
    def side(a, b):
        return a if isinstance(a, int) and a > 0 and a == b else None
    if len(shape) != 4:
        return None, None
    if shape[3] == 3:
        return "NHWC", side(shape[1], shape[2])
    if shape[1] == 3:
        return "NCHW", side(shape[2], shape[3])
    return None, None


def onnx_image_size_and_classes(model_proto):
    """(input side, number of classes) of an ONNX image classifier from its graph's shapes: the side of a square
    NHWC or NCHW input (onnx_input_layout), the last dimension of output `probabilities` (else of its only output);
    None where a shape does not say."""
    def dims(value):
        return [dim.dim_value if dim.HasField("dim_value") else None for dim in value.type.tensor_type.shape.dim]
    side = onnx_input_layout(dims(model_proto.graph.input[0]))[1] if model_proto.graph.input else None
    outputs = [value for value in model_proto.graph.output if value.name == "probabilities"]
    if not outputs and len(model_proto.graph.output) == 1:
        outputs = list(model_proto.graph.output)
    shape = dims(outputs[0]) if outputs else []
    return side, (shape[-1] if len(shape) == 2 else None)


def onnx_source(model_proto, where="the ONNX model"):
    """The `source` of the SavedModel or frozen graph an ONNX model was converted from (metadata `source`), or
    None; a UserError naming `where` (its file) and the field of a damaged record."""
    return checked_source(_metadata(model_proto, SOURCE_KEY), f"the export record of {where} (its metadata "
                                                              f"\"{SOURCE_KEY}\")")


def onnx_input_pixels(model_proto):
    """(fact, how it is known) of an ONNX model's input: its `input_pixels` metadata; else "raw" when the graph
    holds the channel means of the input normalisation (an ONNX model exported before the metadata existed);
    else (None, None): nothing says, e.g. the conversion of the original's frozen graph, which expects normalised
    input."""
    recorded = _metadata(model_proto, INPUT_PIXELS)
    normalises = _holds_channel_means(model_proto)
    if recorded == NORMALIZED and normalises:
        # fed normalised pixels, the graph would normalise them again: top-1 0.81 -> 0.10, without a word
        raise UserError("its metadata says it takes normalised pixels, but its graph holds the input normalisation "
                        "(the channel means) and so takes raw ones: the metadata was edited or is wrong; export it "
                        "again")
    if recorded is not None:
        return recorded, "its metadata"
    if normalises:
        return RAW, "the normalisation's channel means in its graph"
    return None, None


def _holds_channel_means(model_proto):
    """Whether an ONNX graph holds the input normalisation's channel means (a float tensor of 3 values)."""
    from onnx import numpy_helper
    import numpy as np
    from utils.image_processing import CHANNEL_MEANS
    means = np.asarray(CHANNEL_MEANS, np.float32)
    tensors = list(model_proto.graph.initializer) + [
        attribute.t for node in model_proto.graph.node if node.op_type == "Constant"
        for attribute in node.attribute if attribute.name == "value"]
    return any(tensor.data_type == 1 and int(np.prod(tensor.dims)) == 3 and
               np.allclose(numpy_helper.to_array(tensor).ravel(), means, atol=1e-3) for tensor in tensors)


def _rename_io(model_proto, old_inputs, new_inputs, old_outputs, new_outputs):
    renames = dict(zip(old_inputs, new_inputs))
    renames.update(zip(old_outputs, new_outputs))
    graph = model_proto.graph
    for value in list(graph.input) + list(graph.output):
        if value.name in renames:
            value.name = renames[value.name]
    for node in graph.node:
        for index, name in enumerate(node.input):
            if name in renames:
                node.input[index] = renames[name]
        for index, name in enumerate(node.output):
            if name in renames:
                node.output[index] = renames[name]


def _save_onnx(model_proto, output_path):
    import onnx
    if output_path:
        _write_atomically(output_path, lambda temporary: onnx.save(model_proto, temporary))
