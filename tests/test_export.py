"""export_frozen_graph.py, export_onnx.py and model/export.py: frozen graphs and ONNX models equal the Keras model."""
import argparse
import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

import export_frozen_graph
from model import checkpoint, export, resnet
from model.layers.quantization import QuantizationConfig
from utils.errors import UserError
from tests._cli import child_env, run_script, tool_in_process

SIZE = 32
NUM_CLASSES = 7


def run_cli(script, *args):
    """`python <script> args` called in-process (tests/_cli.py)."""
    return tool_in_process(script.removesuffix(".py"), *args, check=False)


def images(batch=2, seed=0):
    return np.random.RandomState(seed).uniform(0, 255, (batch, SIZE, SIZE, 3)).astype("float32")


def export_args(arch, output_file, *extra):
    return export_frozen_graph.parse_args(["--model_name", arch, "--image_size", str(SIZE), "--num_classes",
                                           str(NUM_CLASSES), "--input_format", "NHWC", "--compute_format", "NHWC",
                                           "--output_file", str(output_file), *extra])


def run_graph_def(graph_def, inputs, output="resnet50/output/softmax"):
    def imported(x):
        return tf.graph_util.import_graph_def(graph_def, input_map={"input:0": x}, return_elements=[output + ":0"])

    function = tf.compat.v1.wrap_function(imported, [tf.TensorSpec([None, SIZE, SIZE, 3], tf.float32)])
    return function(tf.constant(inputs))[0].numpy()


def load_graph_def(path):
    graph_def = tf.compat.v1.GraphDef()
    with open(path, "rb") as handle:
        graph_def.ParseFromString(handle.read())
    return graph_def


def onnx_probabilities(path, inputs):
    import onnxruntime
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(["probabilities"], {"input": inputs})[0]


def keras_probabilities(model, inputs):
    return tf.nn.softmax(model(inputs, training=False)).numpy()


def save_checkpoint(model, directory, use_final_conv=False, input_normalized=False):
    """The runner's checkpoint format (model/checkpoint/), weights and step only."""
    arch = model.name
    entries = dict(checkpoint.model_entries(model, arch), global_step=tf.constant(7, tf.int64))
    meta = checkpoint.metadata(arch, NUM_CLASSES, SIZE, use_final_conv, input_normalized)
    return checkpoint.write(os.path.join(directory, "model.ckpt-7"), entries, meta)


def randomise_bn(model, seed=1):
    """Non-trivial BN statistics so folding and restore errors show."""
    rng = np.random.RandomState(seed)
    for variable in model.variables:
        if "moving_variance" in variable.path:
            variable.assign(rng.uniform(0.5, 2.0, variable.shape).astype("float32"))
        elif "moving_mean" in variable.path or "beta" in variable.path:
            variable.assign(rng.normal(0, 0.2, variable.shape).astype("float32"))


def narrow_resnet50(monkeypatch):
    """resnet50 with one block per stage and an eighth of the widths, for the tests whose subject is the form of the
    exported graph (input layout, text format, quantisation ops), not the size of its weights."""
    monkeypatch.setitem(resnet.ARCHITECTURES, "resnet50", resnet.ArchSpec(
        layers=(1, 1, 1, 1), widths=(8, 16, 32, 64), expansions=4, cardinality=1, use_se=False))


@pytest.mark.shallow
@pytest.mark.parametrize("arch", ["resnet50", "se-resnext101-32x4d"])
def test_frozen_graph_equals_keras_and_resnet50_onnx_too(arch, tmp_path):
    """The whole export of each model family (shallow, tests/_shallow.py: every block is exported the same way):
    SE-ResNeXt101 is ResNeXt101 plus the SE layers (same grouped convs, same names otherwise), so it covers both.
    tf2onnx takes minutes on its per-group convolutions: their ONNX conversion is checked on a two-block model
    below."""
    model = resnet.build_model(arch, num_classes=NUM_CLASSES, image_size=SIZE, seed=3)
    randomise_bn(model)
    prefix = save_checkpoint(model, tmp_path)
    x = images()
    expected = keras_probabilities(model, x)
    output = tmp_path / "frozen.pb"
    graph_def = export_frozen_graph.export(export_args(arch, output, "--checkpoint", prefix), log=lambda *_: None)
    assert not [n for n in graph_def.node if n.op in ("VarHandleOp", "VariableV2", "ReadVariableOp")]
    reloaded = load_graph_def(output)
    got = run_graph_def(reloaded, x, output=f"{arch}/output/softmax")
    np.testing.assert_allclose(got, expected, atol=1e-5)
    if arch == "resnet50":
        onnx_path = tmp_path / "frozen.onnx"
        export.to_onnx(str(output), str(onnx_path))
        np.testing.assert_allclose(onnx_probabilities(onnx_path, x), expected, atol=1e-4)


def test_grouped_convolutions_and_se_convert_to_onnx_equal_keras(tmp_path, monkeypatch):
    """SE-ResNeXt's blocks (32 groups of 4 channels, SE) in a two-block model: frozen graph and ONNX equal Keras."""
    monkeypatch.setitem(resnet.ARCHITECTURES, "small-se-resnext",
                        resnet.ArchSpec(layers=(1, 1), widths=(128, 256), expansions=2, cardinality=32, use_se=True))
    model = resnet.build_model("small-se-resnext", num_classes=NUM_CLASSES, image_size=SIZE, seed=3,
                               purpose="export")
    randomise_bn(model)
    x = images()
    expected = keras_probabilities(model, x)
    graph_def = export.frozen_graph(model, "small-se-resnext", SIZE)
    assert sum(n.op == "Conv2D" for n in graph_def.node) == 1 + 2 * (2 + 32 + 1)  # stem; 1x1, groups, 1x1, shortcut
    output = tmp_path / "frozen.pb"
    export.write_graph_def(graph_def, str(output), as_text=False)
    np.testing.assert_allclose(run_graph_def(graph_def, x, output="small-se-resnext/output/softmax"), expected,
                               atol=1e-5)
    fused, count = export.fuse_grouped_convs(graph_def)
    assert count == 2 and sum(n.op == "Conv2D" for n in fused.node) == 1 + 2 * (2 + 1 + 1) + 2 * 32  # (+ unused)
    onnx_path = tmp_path / "frozen.onnx"
    proto = export.to_onnx(str(output), str(onnx_path))
    # Each block's 32 per-group convolutions are one ONNX Conv with group 32 (ONNX Runtime's and TensorRT's grouped
    # kernels; before, 32 Convs between a Split and a Concat, with a Transpose pair around each).
    groups = sorted(next((a.i for a in n.attribute if a.name == "group"), 1) for n in proto.graph.node
                    if n.op_type == "Conv")
    assert groups == [1] * 7 + [32, 32]
    np.testing.assert_allclose(onnx_probabilities(onnx_path, x), expected, atol=1e-4)
    saved = export.save_saved_model(model, SIZE, str(tmp_path / "saved"))  # the SavedModel's conversion too
    proto = export.to_onnx(saved, str(tmp_path / "saved.onnx"))
    assert sum(any(a.name == "group" and a.i == 32 for a in n.attribute) for n in proto.graph.node) == 2
    assert not [n for n in proto.graph.node if n.op_type == "Split"]
    np.testing.assert_allclose(onnx_probabilities(tmp_path / "saved.onnx", x), expected, atol=1e-4)


@pytest.mark.gpu_path
def test_nchw_input_text_graphdef_final_conv_and_no_normalization(tmp_path, monkeypatch):
    narrow_resnet50(monkeypatch)  # the text form writes every weight as text
    model = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=SIZE, seed=4, use_final_conv=True,
                               input_normalized=True)
    prefix = save_checkpoint(model, tmp_path, use_final_conv=True, input_normalized=True)
    output = tmp_path / "frozen.pbtxt"
    export_frozen_graph.export(export_frozen_graph.parse_args([
        "--image_size", str(SIZE), "--num_classes", str(NUM_CLASSES), "--input_format", "NCHW", "--compute_format",
        "NHWC", "--use_final_conv", "--no_normalization", "--write_text_graphdef", "--checkpoint", prefix,
        "--output_file", str(output)]), log=lambda *_: None)
    from google.protobuf import text_format
    graph_def = text_format.Parse(output.read_text(), tf.compat.v1.GraphDef())
    x = images(seed=5) / 100.0
    got = tf.compat.v1.wrap_function(
        lambda t: tf.graph_util.import_graph_def(graph_def, input_map={"input:0": t},
                                                 return_elements=["resnet50/output/softmax:0"]),
        [tf.TensorSpec([None, 3, SIZE, SIZE], tf.float32)])(tf.constant(x.transpose(0, 3, 1, 2)))[0].numpy()
    np.testing.assert_allclose(got, keras_probabilities(model, x), atol=1e-5)


def test_a_quantized_grouped_graph_converts_to_grouped_onnx_convs_equal_to_tensorflow(tmp_path, monkeypatch):
    """SE-ResNeXt's QAT graph (--quantize --symmetric --use_qdq): the per-group convolutions under their weights'
    quantisation are fused into grouped ONNX Convs too, and ONNX Runtime computes what TensorFlow does."""
    monkeypatch.setitem(resnet.ARCHITECTURES, "se-resnext101-32x4d",
                        resnet.ArchSpec(layers=(1, 1), widths=(128, 256), expansions=2, cardinality=32, use_se=True))
    config = QuantizationConfig(symmetric=True, use_qdq=True)
    trained = resnet.build_model("se-resnext101-32x4d", num_classes=NUM_CLASSES, image_size=SIZE, seed=6,
                                 quantization=config)
    randomise_bn(trained)
    step = tf.function(lambda t: trained(t, training=True))
    for seed in range(3):  # moves the EMA ranges away from their initial values
        step(tf.constant(images(seed=seed)))
    output = tmp_path / "qat.pb"
    export_frozen_graph.export(export_args("se-resnext101-32x4d", output, "--checkpoint",
                                           save_checkpoint(trained, tmp_path), "--quantize", "--symmetric",
                                           "--use_qdq"), log=lambda *_: None)
    graph_def = load_graph_def(output)
    assert export.fuse_grouped_convs(graph_def)[1] == 2
    proto = export.to_onnx(str(output), str(tmp_path / "qat.onnx"))
    assert sum(any(a.name == "group" and a.i == 32 for a in n.attribute) for n in proto.graph.node) == 2
    x = images(seed=9)
    # (ONNX Runtime's int8 kernels may put a value at a bin's edge in the next bin: docs/DEVIATIONS.md, QAT)
    np.testing.assert_allclose(onnx_probabilities(tmp_path / "qat.onnx", x),
                               run_graph_def(graph_def, x, output="se-resnext101-32x4d/output/softmax"), atol=2e-2)


def test_quantized_eval_graph_matches_quantized_keras_and_has_qdq_in_onnx(tmp_path, monkeypatch):
    narrow_resnet50(monkeypatch)
    config = QuantizationConfig(symmetric=True, use_qdq=True)
    trained = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=SIZE, seed=6, quantization=config)
    randomise_bn(trained)
    step = tf.function(lambda t: trained(t, training=True))
    for seed in range(3):  # moves the EMA ranges away from their initial values
        step(tf.constant(images(seed=seed)))
    prefix = save_checkpoint(trained, tmp_path)
    output = tmp_path / "qat.pb"
    lines = []
    export_frozen_graph.export(export_args("resnet50", output, "--checkpoint", prefix, "--quantize", "--symmetric",
                                           "--use_qdq"), log=lines.append)
    # the summary line says the graph is quantised (until 2026-12-07 only the file name told the two apart)
    assert f"[-1, {NUM_CLASSES}] (resnet50, fake-quantised); it takes raw 0..255 RGB pixels" in \
        [line for line in lines if line.startswith("Wrote")][0]
    graph_def = load_graph_def(output)
    convs = 1 + 4 * sum(resnet.ARCHITECTURES["resnet50"].layers)  # an upper bound: the stem, 3 per block, shortcuts
    assert sum(n.op == "QuantizeAndDequantizeV4" for n in graph_def.node) > convs
    evaluator = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=SIZE,
                                   quantization=QuantizationConfig(symmetric=True, use_qdq=True,
                                                                   quantized_inference=True))
    assert checkpoint.load(evaluator, prefix, "resnet50").restored == len(evaluator.variables)
    x = images(seed=9)
    expected = keras_probabilities(evaluator, x)
    np.testing.assert_allclose(run_graph_def(graph_def, x), expected, atol=1e-5)
    # The quantised graph differs from the float one (the quantisation is really there).
    assert np.abs(expected - keras_probabilities(trained, x)).max() > 1e-6
    onnx_path = tmp_path / "qat.onnx"
    proto = export.to_onnx(str(output), str(onnx_path))
    assert export.describe_source(export.onnx_source(proto)) == (
        f"resnet50, {NUM_CLASSES} classes, {SIZE}x{SIZE}, the weights of checkpoint {prefix} (step 7), "
        "quantisation-aware (fake-quantised, symmetric, QuantizeAndDequantize)")
    op_types = [node.op_type for node in proto.graph.node]
    assert op_types.count("QuantizeLinear") > convs and op_types.count("DequantizeLinear") > convs
    # what a record is held to, read from both graphs
    assert export.graph_quantized(graph_def) and export.onnx_quantized(proto)
    assert export.graph_architecture(export.graph_node_names(graph_def)) == "resnet50"
    assert export.graph_architecture(export.onnx_node_names(proto)) == "resnet50"
    # Rounding at a quantisation boundary may differ by one step between TF and ORT: compare loosely.
    np.testing.assert_allclose(onnx_probabilities(onnx_path, x), expected, atol=2e-2)
    # The float graph of the QAT checkpoint says its ranges are unused, as the SavedModel of an evaluation does; the
    # quantised graph of a float checkpoint says its ranges are untrained (2026-12-07: both records were silent).
    export_frozen_graph.export(export_args("resnet50", tmp_path / "f.pb", "--checkpoint", prefix), log=lines.append)
    assert export.describe_source(export.graph_source(load_graph_def(tmp_path / "f.pb"))).endswith(
        "(step 7), the float model of a quantisation-aware checkpoint (its ranges unused)")
    float_prefix = save_checkpoint(resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=SIZE, seed=6),
                                   tmp_path / "float")
    export_frozen_graph.export(export_args("resnet50", tmp_path / "fq.pb", "--checkpoint", float_prefix,
                                           "--quantize"), log=lines.append)
    assert export.describe_source(export.graph_source(load_graph_def(tmp_path / "fq.pb"))).endswith(
        "quantisation-aware (fake-quantised, its activation ranges untrained: a float checkpoint's, at their initial "
        "[-6, 6])")


def test_a_frozen_graph_and_its_onnx_say_whether_they_take_raw_or_normalised_pixels(tmp_path, monkeypatch):
    """export_frozen_graph.py --no_normalization writes a graph that takes normalised pixels: the graph records it
    (node input_pixels), its ONNX conversion carries it as metadata, and an ONNX model without the metadata is
    known to take raw pixels only by the normalisation's channel means in it."""
    import onnx
    narrow_resnet50(monkeypatch)
    for normalized in (False, True):
        model = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=SIZE, seed=4,
                                   input_normalized=normalized)
        prefix = save_checkpoint(model, tmp_path / str(normalized), input_normalized=normalized)
        output = tmp_path / f"{normalized}.pb"
        lines = []
        export_frozen_graph.export(export_args("resnet50", output, "--checkpoint", prefix,
                                               *(["--no_normalization"] if normalized else [])), log=lines.append)
        expected = "normalized" if normalized else "raw"
        assert export.graph_input_pixels(load_graph_def(output)) == expected
        assert [line for line in lines if line.startswith("WARNING")] == [
            checkpoint.unsettled_statistics(7, f"checkpoint {prefix}")]  # step 7: 48% of the BN starting values
        wrote = next(line for line in lines if line.startswith("Wrote"))  # (then: it records no class names)
        assert wrote.endswith("; it takes " + ("normalised pixels, (pixels - mean) / std per RGB channel"
                                               if normalized else "raw 0..255 RGB pixels (normalised in the model)"))
        onnx_path = tmp_path / f"{normalized}.onnx"
        result = run_cli("export_onnx.py", "--input", output, "--output", onnx_path)
        assert result.returncode == 0, result.stderr
        proto = onnx.load(str(onnx_path))
        assert sorted(prop.key for prop in proto.metadata_props) == ["input_pixels", "source"]
        assert export.onnx_input_pixels(proto) == (expected, "its metadata")
        # What the graph is travels with it into the ONNX model (the SavedModel route's record, since 2026-12-05)
        assert export.onnx_source(proto) == export.graph_source(load_graph_def(output)) == {
            "arch": "resnet50", "num_classes": NUM_CLASSES, "image_size": SIZE, "checkpoint": prefix, "step": 7,
            "weights": "raw", "quantized": False, "symmetric": False, "use_qdq": False}
        x = images(seed=5)
        fed = (x - np.float32([123.68, 116.28, 103.53])) / np.float32([58.395, 57.120, 57.385]) if normalized else x
        np.testing.assert_allclose(onnx_probabilities(onnx_path, fed), keras_probabilities(model, fed), atol=1e-4)
        if not normalized:  # a second export to the same files replaces them, and says so
            lines.clear()
            export_frozen_graph.export(export_args("resnet50", output, "--checkpoint", prefix), log=lines.append)
            assert lines[-2].startswith(f"Wrote binary GraphDef {output}, replacing the file there: input 'input' ")
            result = run_cli("export_onnx.py", "--input", output, "--output", onnx_path)
            assert result.stdout.startswith(f"Wrote {onnx_path}, replacing the file there (opset 17, ")
        if not normalized:  # a record edited to say the contrary of the graph is refused, not obeyed
            edited = onnx.ModelProto.FromString(proto.SerializeToString())
            next(prop for prop in edited.metadata_props if prop.key == "input_pixels").value = "normalized"
            with pytest.raises(UserError, match="^its metadata says it takes normalised pixels, but its graph holds "
                                                "the input normalisation"):
                export.onnx_input_pixels(edited)
        del proto.metadata_props[:]  # an ONNX model of an earlier export, or of the original's frozen graph
        assert export.onnx_input_pixels(proto) == ((None, None) if normalized else
                                                   ("raw", "the normalisation's channel means in its graph"))


def test_an_export_records_the_class_names_kept_beside_its_checkpoint(tmp_path, monkeypatch):
    """labels.txt beside the checkpoint (where training keeps the dataset's): the frozen graph records its names,
    output k as line k + 1, its ONNX conversion carries them and inference.py's Model line shows the first; a file
    naming more classes than the model has outputs (another dataset's) is left out."""
    narrow_resnet50(monkeypatch)
    model = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=SIZE, seed=4)
    prefix = save_checkpoint(model, tmp_path / "run")
    names = [f"class {i}, the {i}th" for i in range(NUM_CLASSES)]
    (tmp_path / "run" / "labels.txt").write_text("".join(f"{name}\n" for name in names))
    output = tmp_path / "g.pb"
    lines = []
    export_frozen_graph.export(export_args("resnet50", output, "--checkpoint", prefix), log=lines.append)
    assert export.graph_source(load_graph_def(output))["class_names"] == names
    assert lines[-1] == (f"It records the class names of {tmp_path / 'run' / 'labels.txt'} (output k is line k + 1), "
                         "as its ONNX conversion will")
    result = run_cli("export_onnx.py", "--input", output, "--output", tmp_path / "g.onnx")
    assert result.returncode == 0, result.stderr
    assert f"It carries the {NUM_CLASSES} class names its input records (output k is name k)" in \
        result.stdout.splitlines()
    import onnx
    source = export.onnx_source(onnx.load(str(tmp_path / "g.onnx")))
    assert source["class_names"] == names
    assert export.describe_source(source).startswith(
        f'resnet50, {NUM_CLASSES} classes ("class 0, the 0th", "class 1, the 1th", "class 2, the 2th", ...), ')
    # An edited record's text reaches the terminal escaped (inference.py's Model line), and shortened.
    edited = dict(source, class_names=["\x1b]0;PWN\x07X" + "y" * 2_000_000], checkpoint="\x1b[31m/x")
    assert "\x1b" not in export.describe_source(edited) and len(export.describe_source(edited)) == 1000
    # Fewer names than outputs (the original's 1000 for 1001, a dataset of K classes trained at K + 1 or more):
    # recorded for the first outputs, and read back by export_onnx.py (until 2026-12-07 it refused the record it was
    # given as another model's, and the ONNX model lost its architecture and checkpoint too).
    for count in (NUM_CLASSES - 1, 2):
        (tmp_path / "run" / "labels.txt").write_text("".join(f"{name}\n" for name in names[:count]))
        export_frozen_graph.export(export_args("resnet50", output, "--checkpoint", prefix), log=lines.append)
        assert export.graph_source(load_graph_def(output))["class_names"] == names[:count]
        result = run_cli("export_onnx.py", "--input", output, "--output", tmp_path / "g.onnx")
        assert result.returncode == 0 and "WARNING" not in result.stdout + result.stderr, result.stdout
        assert f"It carries the {count} class names its input records (output k is name k)" in \
            result.stdout.splitlines()
        source = export.onnx_source(onnx.load(str(tmp_path / "g.onnx")))
        assert source["class_names"] == names[:count] and source["checkpoint"] == prefix
        # more outputs left unnamed than the original's last one: the export and inference.py's Model line say so
        # (until 2026-12-07 `10 classes ("astronaut", "cat", ...)` read as ten names)
        few = count < NUM_CLASSES - 1
        assert lines[-1].endswith("(output k is line k + 1){}, as its ONNX conversion will".format(
            f", naming {count} of the {NUM_CLASSES} outputs (outputs {count}..{NUM_CLASSES - 1} by their index only)"
            if few else ""))
        assert export.describe_source(source).startswith('resnet50, {} classes ({}"class 0, the 0th", '.format(
            NUM_CLASSES, f"{count} named: " if few else ""))
    (tmp_path / "run" / "labels.txt").write_text("".join(f"{i}\n" for i in range(NUM_CLASSES + 1)))
    lines.clear()
    export_frozen_graph.export(export_args("resnet50", output, "--checkpoint", prefix), log=lines.append)
    assert "class_names" not in export.graph_source(load_graph_def(output))
    assert lines[-1] == (f"It records no class names ({tmp_path / 'run' / 'labels.txt'} names {NUM_CLASSES + 1} "
                         f"classes, more than the model's {NUM_CLASSES} outputs (another dataset's)): its outputs are "
                         "known by their index only")


def test_an_export_records_its_checkpoint_by_its_absolute_path(tmp_path, monkeypatch):
    """A checkpoint given relative to the working directory is recorded absolute: the record is read from anywhere
    (inference.py in another directory), where the path as typed would name another checkpoint, or none."""
    narrow_resnet50(monkeypatch)
    model = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=SIZE, seed=4)
    prefix = save_checkpoint(model, tmp_path / "run")
    monkeypatch.chdir(tmp_path)
    lines = []
    export_frozen_graph.export(export_args("resnet50", tmp_path / "g.pb", "--checkpoint",
                                           os.path.relpath(prefix, tmp_path)), log=lines.append)
    assert export.graph_source(load_graph_def(tmp_path / "g.pb"))["checkpoint"] == str(tmp_path / "run" /
                                                                                       "model.ckpt-7")
    # (no labels.txt beside it: said, as the names are when there is one)
    assert lines[-1] == (f"It records no class names (no labels.txt beside the checkpoint ({tmp_path / 'run'}"
                         "/labels.txt does not exist)): its outputs are known by their index only")
    result = run_cli("export_onnx.py", "--input", tmp_path / "g.pb", "--output", tmp_path / "g.onnx")
    assert result.returncode == 0, result.stderr
    assert "It records no class names (its input has none in a record that agrees with its graph): its outputs " \
           "are known by their index only" in \
        result.stdout.splitlines()


def test_saved_model_to_onnx(tmp_path, monkeypatch):
    """A model built for inference (as main.py's SavedModel export builds it) converts: its convs are plain Conv2D
    ops (model/kernels.py)."""
    narrow_resnet50(monkeypatch)
    model = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=SIZE, seed=8, purpose="inference")
    saved = export.save_saved_model(model, SIZE, str(tmp_path / "export"))
    onnx_path = tmp_path / "sm.onnx"
    # In a child process: tf2onnx's deprecation notices would go to the process's stderr.
    result = run_script("export_onnx.py", "--input", saved, "--output", onnx_path, check=False,
                        env=child_env(TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Wrote {} (opset 17".format(onnx_path))
    assert result.stderr == ""  # no TensorFlow deprecation notices from tf2onnx's calls (model/export.py)
    x = images(seed=2)
    np.testing.assert_allclose(onnx_probabilities(onnx_path, x), keras_probabilities(model, x), atol=1e-4)


def test_a_bfloat16_saved_model_converts_and_says_onnx_runtime_cannot_load_it(tmp_path, monkeypatch):
    """A SavedModel exported under --amp on a CPU computes in bfloat16: tf2onnx converts it, and the tool says so
    and that ONNX Runtime (no bfloat16 kernels) will not load it; a float32 one says nothing of the kind."""
    narrow_resnet50(monkeypatch)
    for policy in ("mixed_bfloat16", None):
        model = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=SIZE, seed=8,
                                   dtype_policy=policy, purpose="export")
        saved = export.save_saved_model(model, SIZE, str(tmp_path / f"export_{policy}"))
        onnx_path = tmp_path / f"{policy}.onnx"
        result = run_cli("export_onnx.py", "--input", saved, "--output", onnx_path)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.strip().splitlines()
        model_line = (f"Model: 'input' [-1, {SIZE}, {SIZE}, 3] -> 'classes' [-1], 'probabilities' [-1, {NUM_CLASSES}]"
                      "; input: raw 0..255 RGB pixels (normalised in the model)")
        if policy:
            assert lines[0].endswith("QuantizeLinear, computes in bfloat16 and float16)"), lines
            assert lines[1] == model_line
            assert lines[2].startswith("Note: ONNX Runtime has no bfloat16 kernels and will not load this model")
        else:
            assert lines == [f"Wrote {onnx_path} (opset 17, {lines[0].split(', ')[1]}, 0 QuantizeLinear)", model_line,
                             "It records no class names (its input has none in a record that agrees with its "
                             "graph): its outputs are known by their index only"]


def tflite_probabilities(blob, inputs):
    """The `serving_default` signature of a TensorFlow Lite model on `inputs`: its `probabilities` output."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # tf.lite.Interpreter's notice that LiteRT succeeds it
        interpreter = tf.lite.Interpreter(model_content=blob)
    return interpreter.get_signature_runner("serving_default")(input=inputs)["probabilities"]


def test_saved_model_converts_to_tflite_with_its_weights(tmp_path, monkeypatch):
    """TensorFlow Lite's converter freezes the SavedModel's weights into the model (BN folded into the convs), so
    the converted model computes the Keras model's probabilities. It leaves variables it cannot prove constant as
    uninitialised resource variables, which compute NaN: the export must not give it that reason."""
    narrow_resnet50(monkeypatch)
    model = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=SIZE, seed=8, purpose="export")
    randomise_bn(model)
    saved = export.save_saved_model(model, SIZE, str(tmp_path / "export"))
    blob = tf.lite.TFLiteConverter.from_saved_model(saved).convert()
    x = images(seed=3)
    np.testing.assert_allclose(tflite_probabilities(blob, x), keras_probabilities(model, x), atol=1e-5)


def test_cli_errors(tmp_path):
    missing = run_cli("export_frozen_graph.py", "--image_size", "32", "--num_classes", "7", "--compute_format",
                      "NHWC", "--checkpoint", str(tmp_path / "nope"), "--output_file", str(tmp_path / "x.pb"))
    assert missing.returncode == 2 and "ERROR: --checkpoint" in missing.stderr
    no_output = run_cli("export_frozen_graph.py", "--image_size", "32")
    assert no_output.returncode == 2 and no_output.stderr.startswith("ERROR: ") and no_output.stderr.endswith(
        ": the following arguments are required: --output_file (--help lists the flags)\n")  # one line
    usage = " ".join(run_cli("export_frozen_graph.py", "--help").stdout.split())  # (wrapped at the terminal's width)
    assert " --output_file OUTPUT_FILE " in usage and "[--output_file" not in usage  # shown required
    (tmp_path / "garbage.pb").write_bytes(b"\x00\x01not a graph")
    bad = run_cli("export_onnx.py", "--input", str(tmp_path / "garbage.pb"), "--output", str(tmp_path / "o.onnx"))
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("ERROR:")


@pytest.mark.shallow
def test_wrong_architecture_for_checkpoint(tmp_path):
    model = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=SIZE)
    prefix = save_checkpoint(model, tmp_path)
    result = run_cli("export_frozen_graph.py", "--model_name", "resnet50", "--image_size", "32", "--num_classes",
                     "9", "--compute_format", "NHWC", "--checkpoint", prefix, "--output_file",
                     str(tmp_path / "x.pb"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"ERROR: --num_classes 9 contradicts checkpoint {prefix}, trained with --num_classes {NUM_CLASSES} (omit the "
        "flag to use the checkpoint's)")
    other_arch = run_cli("export_frozen_graph.py", "--model_name", "se-resnext101-32x4d", "--image_size", "32",
                         "--num_classes", str(NUM_CLASSES), "--compute_format", "NHWC", "--checkpoint", prefix,
                         "--output_file", str(tmp_path / "x.pb"))
    assert other_arch.returncode == 2 and "--model_name se-resnext101-32x4d contradicts checkpoint" in other_arch.stderr
    assert "trained with --model_name resnet50" in other_arch.stderr


@pytest.mark.gpu_path
@pytest.mark.shallow
def test_nchw_export_restores_an_nhwc_trained_checkpoint(tmp_path):
    """export_frozen_graph.py's defaults are NCHW, our training NHWC: the restore must not depend on the layout."""
    model = resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=SIZE, seed=8)
    randomise_bn(model)
    prefix = save_checkpoint(model, tmp_path)
    lines = []
    graph_def = export_frozen_graph.export(export_args("resnet50", tmp_path / "nchw.pb", "--checkpoint", prefix,
                                                       "--compute_format", "NCHW", "--input_format", "NHWC"),
                                           log=lines.append)
    assert any(line.startswith(f"Restored {len(model.variables)} of {len(model.variables)} variables from {prefix}")
               for line in lines), lines
    layouts = {node.attr["data_format"].s for node in graph_def.node if node.op == "Conv2D"}
    assert layouts == {b"NCHW"}


@pytest.mark.gpu_path
@pytest.mark.shallow
def test_the_default_nchw_frozen_graph_is_laid_out_for_tensorrt(tmp_path):
    """export_frozen_graph.py's defaults (NCHW input, NCHW compute), as TensorRT takes them: placeholder
    [batch, 3, S, S], every conv / pool / BN op in NCHW, one softmax output node of [batch, classes]."""
    graph_def = export_frozen_graph.export(export_args("resnet50", tmp_path / "nchw.pb", "--batch_size", "8",
                                                       "--input_format", "NCHW", "--compute_format", "NCHW"),
                                           log=lambda *_: None)
    placeholders = [node for node in graph_def.node if node.op == "Placeholder"]
    assert [node.name for node in placeholders] == ["input"]
    assert [d.size for d in placeholders[0].attr["shape"].shape.dim] == [8, 3, SIZE, SIZE]
    layouts = {(node.op, node.attr["data_format"].s) for node in graph_def.node
               if node.op in ("Conv2D", "MaxPool", "FusedBatchNormV3")}
    assert {op for op, _ in layouts} == {"Conv2D", "MaxPool", "FusedBatchNormV3"}
    assert {layout for _, layout in layouts} == {b"NCHW"}
    with tf.Graph().as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
        output = tf.compat.v1.get_default_graph().get_tensor_by_name(export.output_node_name("resnet50") + ":0")
        assert output.shape.as_list() == [8, NUM_CLASSES]


# ------------------------------------------------------------------ interrupted writes leave nothing behind
def tiny_graph_def():
    graph = tf.Graph()
    with graph.as_default():
        tf.identity(tf.compat.v1.placeholder(tf.float32, [None, 2], name="input"), name="output")
    return graph.as_graph_def()


def test_graph_def_is_written_whole_and_replaces_the_previous_one(tmp_path):
    output = tmp_path / "out" / "graph.pb"
    export.write_graph_def(tiny_graph_def(), str(output), as_text=False)
    export.write_graph_def(tiny_graph_def(), str(output), as_text=True)
    assert "node {" in output.read_text() and os.listdir(output.parent) == ["graph.pb"]


def test_an_interrupted_graph_def_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    """The interrupt lands inside tf.io.write_graph, which writes `<name>.tmp<hex>` before renaming."""
    def interrupted(graph_def, directory, name, as_text):
        with open(os.path.join(directory, name + ".tmp0123abcd"), "wb") as handle:
            handle.write(b"half a graph")
        raise KeyboardInterrupt

    monkeypatch.setattr(tf.io, "write_graph", interrupted)
    output = tmp_path / "graph.pb"
    output.write_bytes(b"the previous export")
    with pytest.raises(KeyboardInterrupt) as stop:
        export.write_graph_def(tiny_graph_def(), str(output), as_text=False)
    # the previous file is kept, and said not to be this run's (an audit took it for a finished export, 2026-12-07)
    assert stop.value.kept == "no output written to {}; the file there is the one from before, not this run's".format(
        output)
    assert os.listdir(tmp_path) == ["graph.pb"] and output.read_bytes() == b"the previous export"


def test_an_interrupted_onnx_write_leaves_neither_the_file_nor_a_temporary(tmp_path, monkeypatch):
    import onnx

    def interrupted(model_proto, path, *args, **kwargs):
        with open(path, "wb") as handle:
            handle.write(b"half a model")
        raise KeyboardInterrupt

    monkeypatch.setattr(onnx, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export._save_onnx(onnx.ModelProto(), str(tmp_path / "model.onnx"))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"),
                                   tf.errors.ResourceExhaustedError(None, None, "graph.pb.tmp; No space left")])
def test_a_failed_graph_def_or_onnx_write_is_one_line_and_keeps_the_previous_file(tmp_path, monkeypatch, error):
    import onnx

    def full_disk(path):
        with open(path, "wb") as handle:
            handle.write(b"half written")
        raise error

    # tf.io.write_graph writes `<name>.tmp<hex>` first, onnx.save the file it is given.
    monkeypatch.setattr(tf.io, "write_graph", lambda graph_def, directory, name, as_text: full_disk(
        os.path.join(directory, name + ".tmp0123abcd")))
    monkeypatch.setattr(onnx, "save", lambda model_proto, path: full_disk(path))
    output = tmp_path / "graph.pb"
    output.write_bytes(b"the previous export")
    with pytest.raises(UserError, match=r"^cannot write {}: .*No space left".format(output)):
        export.write_graph_def(tiny_graph_def(), str(output), as_text=False)
    with pytest.raises(UserError, match=r"^cannot write {}: ".format(tmp_path / "model.onnx")):
        export._save_onnx(onnx.ModelProto(), str(tmp_path / "model.onnx"))
    assert sorted(os.listdir(tmp_path)) == ["graph.pb"] and output.read_bytes() == b"the previous export"


def test_an_output_that_cannot_be_created_is_refused_before_the_export(tmp_path):
    """Each export tool checks where it writes before it builds, converts or trains anything."""
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    for script, flags, expected in (
            ("export_frozen_graph.py", ["--output_file", str(blocker / "rn50.pb")],
             f"ERROR: --output_file {blocker / 'rn50.pb'} cannot be created: {blocker} is not a directory"),
            ("export_onnx.py", ["--input", str(tmp_path), "--output", str(blocker / "rn50.onnx")],
             f"ERROR: --output {blocker / 'rn50.onnx'} cannot be created: {blocker} is not a directory"),
            ("export_onnx.py", ["--input", str(tmp_path), "--output", str(tmp_path)],
             f"ERROR: --output {tmp_path} is a directory (give the name of the file to write)")):
        result = run_cli(script, *flags)
        assert (result.returncode, result.stderr.strip()) == (2, expected)
    model = tf.keras.Sequential([tf.keras.Input((SIZE, SIZE, 3)), tf.keras.layers.GlobalAveragePooling2D(),
                                 tf.keras.layers.Dense(NUM_CLASSES)])
    with pytest.raises(UserError, match=r"^cannot write the SavedModel under {}: ".format(blocker / "export")):
        export.save_saved_model(model, SIZE, str(blocker / "export"))


def test_an_interrupted_saved_model_export_leaves_no_temporary_directory(tmp_path, monkeypatch):
    def interrupted(module, path, signatures=None):
        os.makedirs(os.path.join(path, "variables"))
        with open(os.path.join(path, "saved_model.pb"), "wb") as handle:
            handle.write(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(tf.saved_model, "save", interrupted)
    model = tf.keras.Sequential([tf.keras.Input((SIZE, SIZE, 3)), tf.keras.layers.GlobalAveragePooling2D(),
                                 tf.keras.layers.Dense(NUM_CLASSES)])
    with pytest.raises(KeyboardInterrupt) as stop:
        export.save_saved_model(model, SIZE, str(tmp_path / "export"))
    assert "no SavedModel written" in stop.value.kept
    # The --export_dir this run created, and its parents, are removed again (they stayed, empty, until 2026-12-05);
    # one that existed is kept, empty or not.
    assert os.listdir(tmp_path) == []
    with pytest.raises(KeyboardInterrupt):
        export.save_saved_model(model, SIZE, str(tmp_path / "new" / "parents" / "export"))
    assert os.listdir(tmp_path) == []
    (tmp_path / "empty").mkdir()
    (tmp_path / "used" / "1796361000").mkdir(parents=True)
    for existing in ("empty", "used"):
        with pytest.raises(KeyboardInterrupt):
            export.save_saved_model(model, SIZE, str(tmp_path / existing))
    assert sorted(os.listdir(tmp_path)) == ["empty", "used"]
    assert os.listdir(tmp_path / "empty") == [] and os.listdir(tmp_path / "used") == ["1796361000"]


def test_two_saved_model_exports_in_the_same_second_get_their_own_directories(tmp_path, monkeypatch):
    """Until 2026-12-06 both took `.tmp-<stamp>` and `<stamp>` from int(time.time()): the loser's partial files
    ended inside the winner's export (94 MB of another model's variables) and its error named a TF temp path."""
    import threading
    both_writing = threading.Barrier(2, timeout=30)

    def save(module, path, signatures=None):  # each export writes its own files, both at once
        os.makedirs(path, exist_ok=True)  # (as TensorFlow's)
        with open(os.path.join(path, "saved_model.pb"), "w") as handle:
            handle.write(threading.current_thread().name)
        both_writing.wait()

    monkeypatch.setattr(tf.saved_model, "save", save)
    monkeypatch.setattr(export.time, "time", lambda: 1796574831.5)
    model = tf.keras.Sequential([tf.keras.Input((SIZE, SIZE, 3)), tf.keras.layers.GlobalAveragePooling2D(),
                                 tf.keras.layers.Dense(NUM_CLASSES)])
    written, failed = {}, []

    def run(who):
        try:
            written[who] = export.save_saved_model(model, SIZE, str(tmp_path / "E"), {"who": who})
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            failed.append(error)

    threads = [threading.Thread(target=run, args=(who,), name=who) for who in ("7", "9")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failed
    assert sorted(os.listdir(tmp_path / "E")) == ["1796574831", "1796574832"]  # the loser took the next second
    for who, path in written.items():
        assert sorted(os.listdir(path)) == ["assets.extra", "saved_model.pb"]
        assert open(os.path.join(path, "saved_model.pb")).read() == who
        assert json.load(open(os.path.join(path, export.SOURCE_FILE)))["who"] == who


def test_a_path_that_is_not_a_saved_model_gets_a_hint_of_what_to_pass(tmp_path):
    exports = tmp_path / "exports"
    # (.tmp-1796363000: an export killed after it wrote saved_model.pb, before its rename; it is no export)
    for stamp in ("1796361000", "1796362000", ".tmp-1796363000"):
        (exports / stamp).mkdir(parents=True)
        (exports / stamp / "saved_model.pb").write_bytes(b"")
    with pytest.raises(UserError) as error:
        export.load_serving_signature(str(exports))
    assert str(error.value) == (f"{exports} is not a SavedModel directory (expected saved_model.pb inside; it holds "
                                f"2 export(s): pass one, e.g. {exports / '1796362000'})")
    training = tmp_path / "run"
    training.mkdir()
    (training / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-3"\n')
    with pytest.raises(UserError) as error:
        export.load_serving_signature(str(training))
    assert str(error.value).endswith(  # the export of evaluate, and the one that needs no data
        f"it is a training directory: export its checkpoint with main.py --mode evaluate --model_dir {training} "
        f"--data_dir <TFRecords> --export_dir <dir>, then pass <dir>/<timestamp>; or, with no data, python "
        f"export_frozen_graph.py --checkpoint {training} --output_file <name>.pb, then python export_onnx.py --input "
        "<name>.pb --output <name>.onnx, and pass <name>.onnx to inference.py --backend onnxruntime)")
    (training / "checkpoint").unlink()  # checkpoint files without the state file: a training directory still
    (training / "model.ckpt-3.index").write_bytes(b"")
    with pytest.raises(UserError, match="it is a training directory: "):
        export.load_serving_signature(str(training))
    with pytest.raises(UserError, match=r"pass the timestamped subdirectory of main.py's --export_dir\)$"):
        export.load_serving_signature(str(tmp_path / "missing"))


def test_a_quantised_export_of_a_float_checkpoint_takes_the_grid_asked_for(tmp_path):
    """A float run records its (unused) QAT flags; they do not bind `--quantize --symmetric --use_qdq` (refused
    until 2026-12-04). A QAT checkpoint's grid still does."""
    from runtime import settings
    from runtime.config import RunConfig
    prefixes = {}
    for name, quantize in (("float", False), ("qat", True)):
        state = settings.training_state(RunConfig(batch_size=2, mode="train", quantize=quantize))
        prefix = str(tmp_path / name / "model.ckpt-1")
        os.makedirs(os.path.dirname(prefix))
        checkpoint.write(prefix, {checkpoint.GLOBAL_STEP_KEY: np.int64(1)},
                         dict(checkpoint.metadata("resnet50", 10, 32, False, False, state), step=1))
        prefixes[name] = prefix
    argv = ["--output_file", str(tmp_path / "m.pb"), "--quantize", "--symmetric", "--use_qdq", "--checkpoint"]
    args = export_frozen_graph.parse_args(argv + [prefixes["float"]])
    export_frozen_graph.resolve_settings(args, checkpoint.inspect(prefixes["float"]), log=lambda *_: None)
    assert (args.symmetric, args.use_qdq, args.num_classes) == (True, True, 10)
    args = export_frozen_graph.parse_args(argv + [prefixes["qat"]])
    with pytest.raises(UserError, match="--symmetric contradicts checkpoint .*, trained without --symmetric"):
        export_frozen_graph.resolve_settings(args, checkpoint.inspect(prefixes["qat"]), log=lambda *_: None)


def test_the_quantised_export_of_a_checkpoint_without_its_grid_says_what_it_assumes(tmp_path):
    """A QAT checkpoint that does not record --symmetric and --use_qdq (the original's, this port's earlier ones)
    exports on the grid of the flags given, as main.py's resume does, and says so in main.py's words."""
    from tests.test_settings import fake_checkpoint
    path = fake_checkpoint(tmp_path, ranges=True, training=None)
    lines = []
    args = export_frozen_graph.parse_args(["--output_file", str(tmp_path / "m.pb"), "--quantize", "--use_qdq",
                                           "--checkpoint", str(path)])
    export_frozen_graph.resolve_settings(args, checkpoint.inspect(path), log=lines.append)
    assert (args.symmetric, args.use_qdq) == (False, True)
    assert f"WARNING: checkpoint {path} does not record --symmetric (metadata of an earlier version of this port, " \
           "or converted from one): this run assumes no --symmetric; pass --symmetric if it was trained " \
           "otherwise" in lines


def test_use_final_conv_of_a_dense_checkpoint_is_said_as_main_py_says_it(tmp_path):
    """A dense classifier exports as a 1x1 conv (the same numbers); main.py says so in a Note, the export said
    nothing. The line is main.py's, word for word."""
    from tests.test_settings import fake_checkpoint, resolve
    path = fake_checkpoint(tmp_path, num_classes=10, use_final_conv=False)
    _, main_lines = resolve(tmp_path, mode="evaluate", use_final_conv=True, num_classes=10)
    note = [line for line in main_lines if "classifier" in line]
    assert note == [f"Note: checkpoint {path} holds its classifier as a dense layer; this run builds it as a 1x1 "
                    "conv (--use_final_conv), from the same weights"]
    lines = []
    args = export_frozen_graph.parse_args(["--output_file", str(tmp_path / "m.pb"), "--use_final_conv",
                                           "--checkpoint", str(path)])
    export_frozen_graph.resolve_settings(args, checkpoint.inspect(path), log=lines.append)
    assert args.use_final_conv and [line for line in lines if "classifier" in line] == note


def test_a_checkpoint_given_where_an_export_is_expected_says_how_to_export_it(tmp_path):
    """export_onnx.py --input and inference.py --model take exports; a training checkpoint's prefix there said it
    "does not exist" (export_onnx.py) or that a SavedModel was expected."""
    prefix = tmp_path / "model.ckpt-7"
    (tmp_path / "model.ckpt-7.index").write_bytes(b"")
    expected = (f"--input {prefix} is a training checkpoint, not an exported model: export it first, e.g. python "
                f"export_frozen_graph.py --checkpoint {prefix} --output_file <name>.pb, then python export_onnx.py "
                "--input <name>.pb --output <name>.onnx")
    with pytest.raises(UserError, match="^" + re.escape(expected) + "$"):
        export.to_onnx(str(prefix), str(tmp_path / "x.onnx"))
    assert export.checkpoint_prefix_hint("--model", str(tmp_path / "model.ckpt-8")) is None  # no such checkpoint
    with pytest.raises(UserError, match="does not exist"):
        export.to_onnx(str(tmp_path / "nothing"), str(tmp_path / "x.onnx"))


def test_ema_weights_asked_of_a_checkpoint_without_them_are_refused_before_any_other_line(tmp_path, monkeypatch):
    """The ERROR comes first and alone: not after "Using ... from checkpoint" and "Restored 267 of 267 variables"."""
    narrow_resnet50(monkeypatch)
    prefix = save_checkpoint(resnet.build_model("resnet50", num_classes=NUM_CLASSES, image_size=SIZE), tmp_path)
    result = run_cli("export_frozen_graph.py", "--checkpoint", prefix, "--use_ema_weights", "--compute_format", "NHWC",
                     "--output_file", str(tmp_path / "ema.pb"))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (f"ERROR: checkpoint {prefix} has no EMA weights (train with --moving_average_decay to "
                             "get them), so --use_ema_weights cannot be used with it\n")
    assert not (tmp_path / "ema.pb").exists()


@pytest.mark.parametrize("field, value, expected", [
    ("num_classes", "ten", 'field "num_classes" is "ten", not an integer from 2 to 1,000,000'),
    ("step", [7], 'field "step" is [7], not an integer from 0 to'),
    ("class_names", {"a": 1}, 'field "class_names" is {"a": 1}, not a list of class names'),
    ("checkpoint", ["x"], 'field "checkpoint" is ["x"], not a path'),
    ("weights", "best", 'field "weights" is "best", not "fresh", "raw" or "ema"'),
    ("diverged", "yes", 'field "diverged" is "yes", not a {"step": N, "sign": "..."} record'),
    ("quantized", "no", 'field "quantized" is "no", not true or false'),
    ("image_size", "\x1b[2J" + "9" * 500, 'field "image_size" is "\\u001b[2J999'),
])
def test_an_export_record_with_a_field_of_the_wrong_type_is_refused_naming_the_file_and_field(
        tmp_path, field, value, expected):
    """Until 2026-12-06 such a record was printed (escaped) as if it were true, or a class_names object stopped
    inference.py with a TypeError traceback. Each of the three places a record is kept is read through the check."""
    import onnx
    from inference import describe_given_model
    good = export.source_record("resnet50", 10, None, False, ["a"] * 10, quantized=False, symmetric=False)
    assert export.checked_source(json.dumps(good), "r") == good
    record = json.dumps(dict(good, **{field: value}))
    saved = tmp_path / "saved"
    (saved / os.path.dirname(export.SOURCE_FILE)).mkdir(parents=True)
    (saved / export.SOURCE_FILE).write_text(record)
    with pytest.raises(UserError) as raised:
        export.read_source(str(saved))
    assert str(raised.value).startswith(f"export record {saved / export.SOURCE_FILE}: {expected}")
    assert "\n" not in str(raised.value) and "\x1b" not in str(raised.value) and len(str(raised.value)) < 400
    args = argparse.Namespace(model=str(saved), data_dir=None)
    with pytest.raises(UserError, match="export record"):
        describe_given_model(args, str(saved), None, log=lambda *_: None)
    graph_def = tf.compat.v1.GraphDef()
    export._add_marker(graph_def, export.SOURCE_NODE, record)
    with pytest.raises(UserError) as raised:
        export.graph_source(graph_def, "g.pb")
    assert str(raised.value).startswith(f"the export record of g.pb (its export_source node): {expected}")
    proto = onnx.ModelProto()
    export._set_metadata(proto, export.SOURCE_KEY, record)
    with pytest.raises(UserError) as raised:
        export.onnx_source(proto, "--model m.onnx")
    assert str(raised.value).startswith(f'the export record of --model m.onnx (its metadata "source"): {expected}')


def test_an_export_record_that_is_no_json_object_is_refused_and_none_is_none(tmp_path):
    for text in ("{broken", "[1, 2]", '"x"'):
        with pytest.raises(UserError, match=r"^r: (not JSON|not a JSON object)"):
            export.checked_source(text, "r")
    assert export.checked_source(None, "r") is None and export.read_source(str(tmp_path)) is None


def test_a_record_that_says_quantized_of_a_float_graph_or_the_reverse_is_refused(tmp_path):
    """A QAT frozen graph's record swapped beside a float model (or a float one beside a QAT graph) described it as
    quantisation-aware (or not) while its graph computed otherwise: the record's `quantized` is held to the graph's
    fake-quantisation ops, in TensorFlow graphs (functions included), SavedModels and ONNX models."""
    import onnx

    def graph_of(function):
        return tf.function(function).get_concrete_function(tf.TensorSpec([2], tf.float32)).graph.as_graph_def()

    fake_quant = graph_of(lambda x: tf.quantization.fake_quant_with_min_max_vars(x, -6.0, 6.0))
    qdq = graph_of(lambda x: tf.quantization.quantize_and_dequantize_v2(x, -6.0, 6.0, range_given=True))
    plain = graph_of(lambda x: x * 2.0)
    assert export.graph_quantized(fake_quant) and export.graph_quantized(qdq) and not export.graph_quantized(plain)
    nested = graph_of(lambda x: tf.function(lambda y: tf.quantization.fake_quant_with_min_max_vars(y, -1.0, 1.0))(x))
    assert not any(node.op in export.QUANTIZATION_OPS for node in nested.node)  # in a function of the library only
    assert export.graph_quantized(nested)

    module = tf.Module()
    module.f = tf.function(lambda x: tf.quantization.fake_quant_with_min_max_vars(x, -6.0, 6.0),
                           input_signature=[tf.TensorSpec([2], tf.float32)])
    tf.saved_model.save(module, str(tmp_path / "quantized"))
    module.f = tf.function(lambda x: x * 2.0, input_signature=[tf.TensorSpec([2], tf.float32)])
    tf.saved_model.save(module, str(tmp_path / "float"))
    assert export.graph_quantized(export.saved_model_graph(str(tmp_path / "quantized")))
    assert not export.graph_quantized(export.saved_model_graph(str(tmp_path / "float")))
    assert export.saved_model_graph(str(tmp_path / "none")) is None

    def onnx_model(*ops):
        nodes = [onnx.helper.make_node(op, ["x"], ["y"]) for op in ops]
        return onnx.helper.make_model(onnx.helper.make_graph(nodes, "g", [], []))

    assert export.onnx_quantized(onnx_model("QuantizeLinear", "DequantizeLinear"))
    assert not export.onnx_quantized(onnx_model("Conv", "Relu"))

    qat_record = {"arch": "resnet50", "num_classes": 10, "image_size": 40, "quantized": True, "symmetric": False}
    float_record = {"arch": "resnet50", "num_classes": 10, "image_size": 40}
    said = []
    assert export.agreeing_source(qat_record, "r", 40, 10, said.append, quantized=True) is qat_record
    assert export.agreeing_source(float_record, "r", 40, 10, said.append, quantized=False) is float_record
    assert export.agreeing_source(qat_record, "r", 40, 10, said.append, quantized=None) is qat_record  # not known
    assert not said
    assert export.agreeing_source(qat_record, "r", 40, 10, said.append, quantized=False) is None
    assert export.agreeing_source(float_record, "r", 40, 10, said.append, quantized=True) is None
    assert said == [
        "WARNING: r is not this model's record: its quantized True (the graph has no fake-quantisation ops) "
        "contradicts the model's graph; it is ignored (another model's, copied beside it?): the model is described "
        "from its graph alone",
        "WARNING: r is not this model's record: its quantized False (the graph has fake-quantisation ops) "
        "contradicts the model's graph; it is ignored (another model's, copied beside it?): the model is described "
        "from its graph alone"]


def test_a_graphs_architecture_is_read_from_the_scope_its_keras_model_names_its_nodes_by():
    """The model is named after --arch, so its nodes are `resnet50/...` (a frozen graph), `resnet50_1/...` (a
    SavedModel's functions, an ONNX conversion): the architecture a record is held to. Names of no one architecture
    (the original's graphs, another tool's, or two architectures' nodes) say none."""
    assert export.graph_architecture(["input", "resnet50/conv2d/Conv2D", "resnet50/output/softmax"]) == "resnet50"
    assert export.graph_architecture(["se-resnext101-32x4d_1/btlnck/conv", "Softmax"]) == "se-resnext101-32x4d"
    assert export.graph_architecture(["resnext101-32x4d_12/x"]) == "resnext101-32x4d"
    assert export.graph_architecture(["StatefulPartitionedCall/resnet50_1/conv2d_1/convolution"]) == "resnet50"
    assert export.graph_architecture(["resnet50_x/conv", "resnet50"]) is None  # a scope, not a node's own name
    assert export.graph_architecture(["resnet50/a", "resnext101-32x4d/b"]) is None
    assert export.graph_architecture(["resnet_v1_50/conv1/Conv2D"]) is None
    said = []
    record = {"arch": "se-resnext101-32x4d", "num_classes": 10, "image_size": 40, "step": 90000}
    assert export.agreeing_source(record, "r", 40, 10, said.append, arch="se-resnext101-32x4d") is record
    assert export.agreeing_source(record, "r", 40, 10, said.append, arch=None) is record
    assert export.agreeing_source(record, "r", 40, 10, said.append, arch="resnet50") is None
    assert said == ["WARNING: r is not this model's record: its arch 'se-resnext101-32x4d' (the graph's: resnet50) "
                    "contradicts the model's graph; it is ignored (another model's, copied beside it?): the model is "
                    "described from its graph alone"]


def test_a_closed_stdout_says_no_graph_was_written(tmp_path, monkeypatch, capsys):
    """`export_frozen_graph.py ... | head -1` stopped with status 141, nothing said and no graph written (until
    2026-12-06); the INTERRUPTED line now says so. Once the graph is on disk, the line says it is there."""
    import sys
    from utils.errors import GuardedStdout

    class ReaderGone:
        def __init__(self):
            self.lines = 0

        def write(self, text):
            if self.lines:
                raise BrokenPipeError(32, "Broken pipe")
            self.lines += text.count("\n")
            return len(text)

        def flush(self):
            pass

    monkeypatch.setattr(export_frozen_graph, "export", lambda args, written: (print("a line"), print("another")))
    monkeypatch.setattr(sys, "stdout", GuardedStdout(ReaderGone()))
    output = tmp_path / "g.pb"
    argv = ["--model_name", "resnet50", "--output_file", str(output)]
    assert export_frozen_graph.main(argv) == 141
    assert capsys.readouterr().err == (f"INTERRUPTED: export_frozen_graph stopped by SIGPIPE; no graph was written to "
                                       f"{output}; run the same command again\n")
    monkeypatch.setattr(export_frozen_graph, "export",
                        lambda args, written: (print("a line"), written.append(args.output_file), print("another")))
    monkeypatch.setattr(sys, "stdout", GuardedStdout(ReaderGone()))
    assert export_frozen_graph.main(argv) == 141
    assert capsys.readouterr().err == (f"INTERRUPTED: export_frozen_graph stopped by SIGPIPE; the graph was written to "
                                       f"{output}; only the lines after it are lost\n")


def test_an_export_of_the_raw_weights_of_a_checkpoint_with_ema_weights_says_raw():
    """inference.py's Model line named an EMA export's weights but called a raw export's of such a checkpoint just
    "the weights" (an audit, 2026-12-08): the record now says the checkpoint also holds EMA weights."""
    from types import SimpleNamespace
    info = SimpleNamespace(path="/runs/a/model.ckpt-4", step=4, diverged=None, has_weight_averages=True)
    raw = export.source_record("resnet50", 2, info, ema=False, image_size=32)
    assert raw["checkpoint_has_ema"] is True
    assert export.describe_source(export.checked_source(json.dumps(raw), "r")).endswith(
        "32x32, the raw weights of checkpoint /runs/a/model.ckpt-4 (step 4; it also holds EMA weights)")
    ema = export.source_record("resnet50", 2, info, ema=True, image_size=32)
    assert "checkpoint_has_ema" not in ema
    assert export.describe_source(ema).endswith("32x32, the EMA weights of checkpoint /runs/a/model.ckpt-4 (step 4)")
    info.has_weight_averages = False
    plain = export.source_record("resnet50", 2, info, ema=False, image_size=32)
    assert export.describe_source(plain).endswith("32x32, the weights of checkpoint /runs/a/model.ckpt-4 (step 4)")
