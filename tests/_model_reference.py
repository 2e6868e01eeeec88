"""Independent NumPy reference for the model tests: SAME-padded (grouped) conv, BN, bottleneck block, head."""
import numpy as np


def same_padding(size, kernel, stride):
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return out, total // 2, total - total // 2


def conv2d(x, kernel, stride=1, groups=1):
    """NHWC x, HWIO kernel with input depth C/groups, TF 'SAME' padding (extra pad at the end)."""
    batch, height, width, channels = x.shape
    kh, kw, cg, out_channels = kernel.shape
    assert cg * groups == channels
    out_h, top, bottom = same_padding(height, kh, stride)
    out_w, left, right = same_padding(width, kw, stride)
    padded = np.pad(x.astype(np.float64), ((0, 0), (top, bottom), (left, right), (0, 0)))
    og = out_channels // groups
    out = np.zeros((batch, out_h, out_w, out_channels))
    for g in range(groups):
        xg = padded[..., g * cg:(g + 1) * cg]
        kg = kernel[..., g * og:(g + 1) * og].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                patch = xg[:, i:i + (out_h - 1) * stride + 1:stride, j:j + (out_w - 1) * stride + 1:stride, :]
                out[..., g * og:(g + 1) * og] += patch @ kg[i, j]
    return out


def conv2d_gradients(x, kernel, upstream, stride=1):
    """(d/dx, d/dkernel) of sum(upstream * conv2d(x, kernel, stride)) for an ungrouped SAME conv."""
    batch, height, width, channels = x.shape
    kh, kw = kernel.shape[:2]
    out_h, top, bottom = same_padding(height, kh, stride)
    out_w, left, right = same_padding(width, kw, stride)
    padded = np.pad(x.astype(np.float64), ((0, 0), (top, bottom), (left, right), (0, 0)))
    upstream = upstream.astype(np.float64)
    grad_padded = np.zeros_like(padded)
    grad_kernel = np.zeros(kernel.shape)
    for i in range(kh):
        for j in range(kw):
            rows = slice(i, i + (out_h - 1) * stride + 1, stride)
            cols = slice(j, j + (out_w - 1) * stride + 1, stride)
            grad_padded[:, rows, cols, :] += upstream @ kernel[i, j].astype(np.float64).T
            grad_kernel[i, j] = np.einsum("bhwc,bhwo->co", padded[:, rows, cols, :], upstream)
    return grad_padded[:, top:top + height, left:left + width, :], grad_kernel


def batch_norm_inference(x, gamma, beta, mean, variance, eps=1e-5):
    return (x - mean) / np.sqrt(variance + eps) * gamma + beta


def relu(x):
    return np.maximum(x, 0.0)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def conv_bn(x, params, prefix, stride=1, groups=1, activation=True):
    y = conv2d(x, params[prefix + "kernel"], stride, groups)
    y = batch_norm_inference(y, *(params[prefix + k] for k in ("gamma", "beta", "moving_mean", "moving_variance")))
    return relu(y) if activation else y


def bottleneck_inference(x, params, stride, groups, projection, se):
    """v1.5 bottleneck: 1x1 -> 3x3/stride (grouped) -> 1x1 -> [SE] -> + shortcut -> ReLU."""
    r = conv_bn(x, params, "b1/")
    r = conv_bn(r, params, "b2/", stride=stride, groups=groups)
    r = conv_bn(r, params, "b3/", activation=False)
    if se:
        s = relu(r.mean(axis=(1, 2)) @ params["se/dense/kernel"] + params["se/dense/bias"])
        s = sigmoid(s @ params["se/dense_1/kernel"] + params["se/dense_1/bias"])
        r = r * s[:, None, None, :]
    shortcut = conv_bn(x, params, "sc/", stride=stride, activation=False) if projection else x
    return relu(shortcut + r)


def head(features, kernel, bias):
    return features.mean(axis=(1, 2)) @ kernel + bias
