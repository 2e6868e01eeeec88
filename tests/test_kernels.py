"""model/kernels.py: the conv formulations a model is built with, from the platform and the purpose (train, inference,
export), and what that choice changes (the ops in the graph) and keeps (logits, variables, checkpoint names). The
models are shallow (tests/_shallow.py): the choice is made per layer, the same in every block."""
import numpy as np
import pytest
import tensorflow as tf

from model.checkpoint_names import tf1_variable_map
from model.kernels import CPU_PLAIN_KERNELS, CPU_TRAINING_KERNELS, GPU_KERNELS, PURPOSES, Kernels, choose_kernels
from model.layers.conv import Conv2D
from model.layers.grouped_conv import GroupedConv2D
from model.resnet import ARCHITECTURES, build_model
from utils.devices import CPU, Platform

pytestmark = pytest.mark.shallow


def _conv_count(arch):
    """Conv2D ops of an inference build: the stem, 3 per bottleneck block and each stage's projection; a grouped
    3x3 conv is one Conv2D per group."""
    spec = ARCHITECTURES[arch]
    blocks = sum(spec.layers)
    return 1 + blocks * (2 + spec.cardinality) + len(spec.layers)


def test_the_platform_and_purpose_pick_the_kernels():
    """Decided by the Platform passed in (utils/devices.py) and the purpose, not by what devices this process sees."""
    gpu = Platform(gpu=True)
    assert {purpose: choose_kernels(CPU, purpose) for purpose in PURPOSES} == {
        "train": Kernels("cpu", "split"), "inference": Kernels("native", "per_group_conv"),
        "export": Kernels("native", "per_group_conv")}
    assert {purpose: choose_kernels(gpu, purpose) for purpose in PURPOSES} == dict.fromkeys(PURPOSES, GPU_KERNELS)
    assert GPU_KERNELS == Kernels("native", "native")
    with pytest.raises(ValueError, match="purpose must be one of train, inference, export, got 'eval'"):
        choose_kernels(CPU, "eval")
    with pytest.raises(ValueError, match="implementation must be one of"):
        Kernels(conv="native", grouped="cpu")
    with pytest.raises(ValueError, match="implementation must be one of"):
        Kernels(conv="split", grouped="split")


def _implementations(model, layer_type):
    return {layer.implementation for layer in model._flatten_layers(include_self=False, recursive=True)
            if isinstance(layer, layer_type)}


@pytest.mark.parametrize("platform,purpose", [
    (CPU, "train"), (CPU, "export"), pytest.param(Platform(gpu=True), "inference", marks=pytest.mark.gpu_path)])
def test_every_conv_layer_is_built_with_the_chosen_kernels(platform, purpose):
    expected = choose_kernels(platform, purpose)
    model = build_model("resnext101-32x4d", num_classes=10, image_size=32, platform=platform, purpose=purpose)
    assert _implementations(model, Conv2D) == {expected.conv}
    assert _implementations(model, GroupedConv2D) == {expected.grouped}


def test_explicit_kernels_override_the_choice_and_bad_arguments_are_refused():
    model = build_model("resnet50", num_classes=10, image_size=32, purpose="export", kernels=CPU_TRAINING_KERNELS)
    assert _implementations(model, Conv2D) == {"cpu"}
    with pytest.raises(ValueError, match="purpose must be one of"):
        build_model("resnet50", num_classes=10, image_size=32, purpose="serving")
    with pytest.raises(ValueError, match="purpose must be one of"):
        build_model("resnet50", num_classes=10, image_size=32, purpose="serving", kernels=CPU_PLAIN_KERNELS)
    with pytest.raises(TypeError, match="kernels must be a model.kernels.Kernels"):
        build_model("resnet50", num_classes=10, image_size=32, kernels="native")


@pytest.fixture(scope="module", params=["resnet50", "resnext101-32x4d"])
def train_and_inference_builds(request):
    """(arch, [train-built model, inference-built model with the same weights], their traced inference forwards)."""
    arch = request.param
    trained = build_model(arch, num_classes=3, image_size=32, seed=5, weight_init="fan_in")
    rng = np.random.default_rng(5)
    for variable in trained.variables:  # non-trivial BN statistics, so a mismatched variable would show
        if "moving_variance" in variable.path:
            variable.assign(rng.uniform(0.5, 2.0, variable.shape).astype("f4"))
        elif "moving_mean" in variable.path or "beta" in variable.path:
            variable.assign(rng.normal(0, 0.2, variable.shape).astype("f4"))
    serving = build_model(arch, num_classes=3, image_size=32, purpose="inference")
    serving.set_weights(trained.get_weights())
    spec = tf.TensorSpec([2, 32, 32, 3], tf.float32)
    forwards = [tf.function(lambda x, model=model: model(x, training=False)).get_concrete_function(spec)
                for model in (trained, serving)]
    return arch, (trained, serving), forwards


def _graph_ops(concrete_function):
    graph = concrete_function.graph.as_graph_def()
    return [node.op for node in graph.node] + [n.op for f in graph.library.function for n in f.node_def]


def test_a_cpu_inference_build_traces_to_plain_convs_and_a_training_build_keeps_its_formulations(
        train_and_inference_builds):
    """The inference-built model's forward holds Conv2D ops only (the classifier's one MatMul aside); the
    train-built one keeps its matmul / patches formulations in inference calls too (at 32 px the stage 0 1x1 convs
    are matmuls, the 3x3 convs of stages 1-3 patches + matmul, the stem's 7x7 conv on a 16x16 output native)."""
    arch, _, (trained, serving) = train_and_inference_builds
    formulation_ops = ("ExtractImagePatches", "Einsum", "BatchMatMulV2")
    ops = _graph_ops(serving)
    assert ops.count("Conv2D") == _conv_count(arch) and ops.count("MatMul") == 1
    assert not [op for op in ops if op in formulation_ops]
    ops = _graph_ops(trained)
    assert "ExtractImagePatches" in ops and ops.count("MatMul") > 1 and "Conv2D" in ops


def test_train_and_inference_builds_give_the_same_logits_on_the_same_weights(train_and_inference_builds):
    _, _, forwards = train_and_inference_builds
    images = np.random.default_rng(6).uniform(0, 255, (2, 32, 32, 3)).astype("f4")
    trained, serving = (forward(tf.constant(images)).numpy() for forward in forwards)
    assert np.abs(trained).max() > 1e-3
    np.testing.assert_allclose(serving, trained, rtol=1e-4, atol=1e-4 * np.abs(trained).max())


def test_train_inference_and_gpu_builds_have_the_same_checkpoint_keys(train_and_inference_builds):
    """Same TF1 names for the same variable paths and shapes: a checkpoint of any build restores into the others
    (model/checkpoint_names.py), and a test may build with whichever kernels build fastest (GPU_KERNELS: one
    grouped conv) where only the variables matter."""
    arch, models, _ = train_and_inference_builds
    models = [*models, build_model(arch, num_classes=3, image_size=32, kernels=GPU_KERNELS)]
    assert [v.path for v in models[1].variables] == [v.path for v in models[2].variables] == \
        [v.path for v in models[0].variables]
    keys = [{name: (variable.path, tuple(variable.shape)) for name, variable in tf1_variable_map(model, arch).items()}
            for model in models]
    assert keys[0] == keys[1] == keys[2] and len(keys[0]) == len(models[0].variables)
