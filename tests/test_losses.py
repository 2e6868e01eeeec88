"""Loss pieces against NumPy references (docs/ORIGINAL.md#loss-and-label-smoothing, docs/ORIGINAL.md#mixup,
docs/ORIGINAL.md#weight-decay)."""

import numpy as np
import pytest
import tensorflow as tf

from utils import losses


def np_log_softmax(x):
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def test_smoothed_one_hot_spreads_mass_over_all_outputs():
    eps, n = 0.1, 1001
    targets = losses.smoothed_one_hot(tf.constant([0, 999]), n, eps).numpy()
    assert targets.shape == (2, n)
    assert targets[0, 0] == pytest.approx(1 - eps + eps / n)
    assert targets[0, 1000] == pytest.approx(eps / n)  # the never-used index gets mass too
    np.testing.assert_allclose(targets.sum(axis=1), 1.0, rtol=1e-6)


def test_cross_entropy_is_batch_mean_against_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 7)).astype(np.float32)
    labels = np.array([0, 3, 6, 2])
    eps = 0.2
    targets = np.full((4, 7), eps / 7, np.float32)
    targets[np.arange(4), labels] = 1 - eps + eps / 7
    expected = -(targets * np_log_softmax(logits.astype(np.float64))).sum(axis=1).mean()
    got = losses.softmax_cross_entropy(losses.smoothed_one_hot(labels, 7, eps), tf.constant(logits)).numpy()
    assert got == pytest.approx(expected, rel=1e-5)


def test_mixup_pairs_example_i_with_reversed_batch():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 2, 2, 3)).astype(np.float32)
    y = np.eye(4, dtype=np.float32)
    lam = np.array([0.1, 0.5, 0.7, 1.0], np.float32)
    mixed_x, mixed_y = losses.mixup(tf.constant(x), tf.constant(y), tf.constant(lam))
    expected_x = lam[:, None, None, None] * x + (1 - lam[:, None, None, None]) * x[::-1]
    expected_y = lam[:, None] * y + (1 - lam[:, None]) * y[::-1]
    np.testing.assert_allclose(mixed_x.numpy(), expected_x, rtol=1e-6)
    np.testing.assert_allclose(mixed_y.numpy(), expected_y, rtol=1e-6)


def test_mixup_on_raw_pixels_equals_mixup_on_normalised_pixels():
    mean = np.array([123.68, 116.28, 103.53], np.float32)
    std = np.array([58.395, 57.120, 57.385], np.float32)
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 255, size=(6, 3, 3, 3)).astype(np.float32)
    lam = rng.uniform(size=6).astype(np.float32)
    y = np.eye(6, dtype=np.float32)
    raw_mixed, _ = losses.mixup(tf.constant(x), tf.constant(y), tf.constant(lam))
    norm_mixed, _ = losses.mixup(tf.constant((x - mean) / std), tf.constant(y), tf.constant(lam))
    np.testing.assert_allclose((raw_mixed.numpy() - mean) / std, norm_mixed.numpy(), atol=1e-4)


def test_beta_samples_have_beta_moments():
    alpha = 0.2
    lam = losses.sample_beta([20000], alpha, seed=tf.constant([3, 4], tf.int64)).numpy()
    assert lam.min() >= 0 and lam.max() <= 1
    assert lam.mean() == pytest.approx(0.5, abs=0.02)
    # Var of Beta(a, a) = 1 / (4 (2a + 1))
    assert lam.var() == pytest.approx(1 / (4 * (2 * alpha + 1)), rel=0.05)
    again = losses.sample_beta([20000], alpha, seed=tf.constant([3, 4], tf.int64)).numpy()
    np.testing.assert_array_equal(lam, again)


@pytest.mark.parametrize("alpha", [0.2, 1.0, 4.0])
def test_beta_samples_follow_the_beta_a_a_distribution(alpha):
    n = 20000
    lam = losses.sample_beta([n], alpha, seed=tf.constant([5, 6], tf.int64)).numpy().astype(np.float64)
    variance = 1 / (4 * (2 * alpha + 1))  # Beta(a, a): mean 1/2, variance 1 / (4 (2a + 1))
    assert abs(lam.mean() - 0.5) < 4 * np.sqrt(variance / n)
    assert lam.var() == pytest.approx(variance, rel=0.05)
    # The whole distribution: two-sample Kolmogorov-Smirnov against NumPy's Beta sampler, at the 0.1% level.
    reference = np.sort(np.random.default_rng(0).beta(alpha, alpha, n))
    ours = np.sort(lam)
    grid = np.concatenate([ours, reference])
    distance = np.max(np.abs(np.searchsorted(ours, grid, side="right") -
                             np.searchsorted(reference, grid, side="right"))) / n
    assert distance < 1.95 * np.sqrt(2 / n)


def test_l2_is_half_sum_of_squares_times_decay():
    a = tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3))
    b = tf.Variable(np.array([1.5, -2.0], np.float32))
    got = losses.l2_loss([a, b], 1e-4).numpy()
    expected = 1e-4 * (np.sum(np.arange(6) ** 2) + 1.5 ** 2 + 4.0) / 2
    assert got == pytest.approx(expected, rel=1e-6)
    assert losses.l2_loss([], 1e-4).numpy() == 0.0


def test_the_l2_term_is_one_float32_reduction_of_its_terms():
    """tf.add_n adds three or more inputs in a run-time order (and Grappler merges a chain of adds into one AddN): the
    L2 term is one reduction over its stacked terms instead, the float32 sum of the terms to float32 rounding."""
    values = np.random.default_rng(0).uniform(0, 1, 55).astype(np.float32) * np.float32(10) ** np.arange(-3, 2.5, 0.1,
                                                                                                     dtype=np.float32)
    variables = [tf.Variable([v * 2.0 ** 0.5]) for v in values]  # l2_loss(v) = v ** 2 / 2
    squares = np.array([np.float32(np.float32(v * np.float32(2.0 ** 0.5)) ** 2 / 2) for v in values], np.float64)
    assert losses.l2_loss(variables, 1.0).numpy() == pytest.approx(squares.sum(), rel=1e-6)
    graph = tf.function(lambda: losses.l2_loss(variables, 1.0)).get_concrete_function().graph.as_graph_def()
    assert not [node for node in graph.node if node.op == "AddN"]


def test_top_k_hits_counts_ties_as_hits():
    logits = tf.constant([[1.0, 1.0, 0.0], [0.0, 2.0, 1.0]])
    assert int(losses.top_k_hits(tf.constant([1, 2]), logits, 1)) == 1
    assert int(losses.top_k_hits(tf.constant([1, 2]), logits, 2)) == 2


def test_cutmix_pastes_the_box_of_the_paired_image_and_weights_labels_by_area():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(3, 8, 10, 3)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)
    boxes = np.array([[1, 2, 5, 7], [0, 0, 8, 10], [3, 3, 3, 9]], np.int32)  # 4x5, whole image, empty
    mixed_x, mixed_y = losses.cutmix(tf.constant(x), tf.constant(y), tf.constant(boxes))
    expected_x = x.copy()
    for i, (y0, x0, y1, x1) in enumerate(boxes):
        expected_x[i, y0:y1, x0:x1] = x[2 - i, y0:y1, x0:x1]
    np.testing.assert_array_equal(mixed_x.numpy(), expected_x)
    own = 1 - np.array([20, 80, 0]) / 80.0  # the share of each image's own pixels
    np.testing.assert_allclose(mixed_y.numpy(), own[:, None] * y + (1 - own[:, None]) * y[::-1], rtol=1e-6)
    np.testing.assert_allclose(mixed_y.numpy().sum(axis=1), 1.0, rtol=1e-6)


def test_cutmix_boxes_cover_one_minus_lambda_of_the_image_and_stay_inside():
    lam = tf.constant(np.linspace(0.05, 0.95, 400).astype(np.float32))
    boxes = losses.cutmix_boxes(lam, 64, 48, tf.constant([3, 4], tf.int64)).numpy()
    y0, x0, y1, x1 = boxes.T
    assert (y0 >= 0).all() and (x0 >= 0).all() and (y1 <= 64).all() and (x1 <= 48).all()
    assert (y1 >= y0).all() and (x1 >= x0).all()
    ratio = np.sqrt(1 - lam.numpy())
    unclipped = (y0 > 0) & (x0 > 0) & (y1 < 64) & (x1 < 48)
    # Away from the edges a box has sides floor(side * ratio) rounded down to even: its area is (1 - lam) * H * W
    # up to those roundings.
    assert unclipped.sum() > 50
    sides_h = 2 * (np.floor(64 * ratio).astype(int) // 2)
    sides_w = 2 * (np.floor(48 * ratio).astype(int) // 2)
    np.testing.assert_array_equal((y1 - y0)[unclipped], sides_h[unclipped])
    np.testing.assert_array_equal((x1 - x0)[unclipped], sides_w[unclipped])
    area = ((y1 - y0) * (x1 - x0))[unclipped]
    np.testing.assert_allclose(area / (64 * 48), (1 - lam.numpy())[unclipped], atol=2 * (64 + 48) / (64 * 48))
    centres = (y0 + y1) / 2.0
    assert 20 < centres[unclipped].mean() < 44  # centres spread over the image, not stuck at a corner
    again = losses.cutmix_boxes(lam, 64, 48, tf.constant([3, 4], tf.int64)).numpy()
    np.testing.assert_array_equal(boxes, again)  # seeded


def test_cutmix_with_mixup_gives_each_example_one_of_the_two():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(4, 4, 4, 3)).astype(np.float32)
    y = np.eye(4, dtype=np.float32)
    lam = tf.constant([0.3, 0.6, 0.2, 0.9])
    boxes = tf.constant([[0, 0, 2, 2]] * 4)
    use = tf.constant([True, False, False, True])
    mixed = losses.mixup(tf.constant(x), tf.constant(y), lam)
    cut = losses.cutmix(tf.constant(x), tf.constant(y), boxes)
    both = losses.cutmix(tf.constant(x), tf.constant(y), boxes, use, mixed)
    for i, from_cutmix in enumerate(use.numpy()):
        source = cut if from_cutmix else mixed
        np.testing.assert_array_equal(both[0][i].numpy(), source[0][i].numpy())
        np.testing.assert_array_equal(both[1][i].numpy(), source[1][i].numpy())
