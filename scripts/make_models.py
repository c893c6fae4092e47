#!/usr/bin/python3
"""Writes the generated benchmark models (random weights, fixed seed) into .cache/models/:
MLPs, MobileNetV2, MobileNetV3-Large, ResNet-50, light face and line detectors, two transformer encoder
layers (ReLU; BERT-style GELU) and a 1-node model (per-run overhead).
Rows for them are in scripts/generated_models.tsv. Idempotent: skips files that exist."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".cache", "models")
os.makedirs(out_dir, exist_ok=True)


class B:
    """Tiny ONNX graph builder."""

    def __init__(self, seed):
        self.nodes, self.inits, self.n = [], [], 0
        self.rng = np.random.default_rng(seed)

    def name(self, p):
        self.n += 1
        return f"{p}{self.n}"

    def const(self, arr, p="w"):
        nm = self.name(p)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), nm))
        return nm

    def weight(self, shape, fan_in):
        return self.const((self.rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32))

    def op(self, op, ins, **attrs):
        o = self.name(op.lower())
        self.nodes.append(helper.make_node(op, ins, [o], **attrs))
        return o

    def conv(self, x, cin, cout, k, s=1, g=1, act="Relu"):
        w = self.weight((cout, cin // g, k, k), cin // g * k * k)
        b = self.const((self.rng.standard_normal(cout) * 0.01).astype(np.float32), "b")
        y = self.op("Conv", [x, w, b], kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4, group=g)
        if act == "Relu":
            y = self.op("Relu", [y])
        elif act == "Relu6":
            y = self.op("Clip", [y, self.const(np.float32(0)), self.const(np.float32(6))])
        elif act == "HardSwish":
            y = self.op("HardSwish", [y])
        return y

    def save(self, name, inputs, outputs, opset=17):
        g = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        path = os.path.join(out_dir, name + ".onnx")
        onnx.save(m, path + ".tmp")
        os.replace(path + ".tmp", path)


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def mlp(name, dims):
    b = B(1)
    x = "x"
    for i in range(len(dims) - 1):
        w = b.weight((dims[i], dims[i + 1]), dims[i])
        c = b.const(np.zeros(dims[i + 1], np.float32), "b")
        x = b.op("Gemm", [x, w, c])
        if i + 2 < len(dims):
            x = b.op("Relu", [x])
    b.nodes.append(helper.make_node("Identity", [x], ["y"]))
    b.save(name, [f32("x", [1, dims[0]])], [f32("y", [1, dims[-1]])])


def relu_1node():
    b = B(2)
    b.nodes.append(helper.make_node("Relu", ["x"], ["y"]))
    b.save("one_node_relu", [f32("x", [1, 16])], [f32("y", [1, 16])])


def inverted_residuals(b, x, cin, cfg, skips=None):
    """MobileNetV2's blocks: (expansion t, channels c, repeats n, first stride s) per stage; the
    last output of each stage goes to skips[c] when given. Returns (x, channels)."""
    for t, c, n, s in cfg:
        for i in range(n):
            stride = s if i == 0 else 1
            hid = cin * t
            y = x if t == 1 else b.conv(x, cin, hid, 1, act="Relu6")
            y = b.conv(y, hid, hid, 3, stride, g=hid, act="Relu6")
            y = b.conv(y, hid, c, 1, act=None)
            x = b.op("Add", [x, y]) if stride == 1 and cin == c else y
            cin = c
        if skips is not None:
            skips[c] = x
    return x, cin


def mobilenetv2():
    b = B(3)
    x = b.conv("x", 3, 32, 3, 2, act="Relu6")
    cfg = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
    x, cin = inverted_residuals(b, x, 32, cfg)
    x = b.conv(x, cin, 1280, 1, act="Relu6")
    x = b.op("GlobalAveragePool", [x])
    x = b.op("Flatten", [x])
    w = b.weight((1280, 1000), 1280)
    b.nodes.append(helper.make_node("Gemm", [x, w, b.const(np.zeros(1000, np.float32))], ["y"]))
    b.save("mobilenetv2", [f32("x", [1, 3, 224, 224])], [f32("y", [1, 1000])])


def mobilenetv3():
    """MobileNetV3-Large (Howard et al. 2019, table 1): HardSwish, 5x5 depthwise convs and
    squeeze-and-excitation (GlobalAveragePool, 1x1 convs, HardSigmoid, Mul) as exporters write them."""
    b = B(6)

    def div8(v):
        return max(8, int(v + 4) // 8 * 8)

    x = b.conv("x", 3, 16, 3, 2, act="HardSwish")
    cin = 16
    cfg = [(3, 16, 16, False, "Relu", 1), (3, 64, 24, False, "Relu", 2), (3, 72, 24, False, "Relu", 1),
           (5, 72, 40, True, "Relu", 2), (5, 120, 40, True, "Relu", 1), (5, 120, 40, True, "Relu", 1),
           (3, 240, 80, False, "HardSwish", 2), (3, 200, 80, False, "HardSwish", 1),
           (3, 184, 80, False, "HardSwish", 1), (3, 184, 80, False, "HardSwish", 1),
           (3, 480, 112, True, "HardSwish", 1), (3, 672, 112, True, "HardSwish", 1),
           (5, 672, 160, True, "HardSwish", 2), (5, 960, 160, True, "HardSwish", 1),
           (5, 960, 160, True, "HardSwish", 1)]
    for k, exp, c, se, act, s in cfg:
        y = x if exp == cin else b.conv(x, cin, exp, 1, act=act)
        y = b.conv(y, exp, exp, k, s, g=exp, act=act)
        if se:
            sq = div8(exp // 4)
            z = b.op("GlobalAveragePool", [y])
            z = b.conv(z, exp, sq, 1, act="Relu")
            z = b.op("HardSigmoid", [b.conv(z, sq, exp, 1, act=None)], alpha=1 / 6, beta=0.5)
            y = b.op("Mul", [y, z])
        y = b.conv(y, exp, c, 1, act=None)
        x = b.op("Add", [x, y]) if s == 1 and cin == c else y
        cin = c
    x = b.conv(x, cin, 960, 1, act="HardSwish")
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])])
    w1 = b.weight((960, 1280), 960)
    x = b.op("HardSwish", [b.op("Gemm", [x, w1, b.const(np.zeros(1280, np.float32))])])
    w = b.weight((1280, 1000), 1280)
    b.nodes.append(helper.make_node("Gemm", [x, w, b.const(np.zeros(1000, np.float32))], ["y"]))
    b.save("mobilenetv3", [f32("x", [1, 3, 224, 224])], [f32("y", [1, 1000])])


def face_detector():
    """A light face detector shaped like Ultra-Light-Fast-Generic-Face-Detector's slim 320x240
    model: a depthwise-separable backbone, SSD heads at four scales (separable convs), their
    outputs transposed, reshaped and concatenated, a Softmax over the two classes."""
    b = B(7)

    def dw_sep(x, cin, cout, s):
        return b.conv(b.conv(x, cin, cin, 3, s, g=cin), cin, cout, 1)

    def head(x, cin, cout, sep=True):
        y = b.conv(b.conv(x, cin, cin, 3, 1, g=cin), cin, cout, 1, act=None) if sep else b.conv(x, cin, cout, 3, act=None)
        y = b.op("Transpose", [y], perm=[0, 2, 3, 1])
        return y

    x = b.conv("x", 3, 16, 3, 2)
    x = dw_sep(x, 16, 32, 1)
    x = dw_sep(x, 32, 32, 2)
    x = dw_sep(x, 32, 32, 1)
    x = dw_sep(x, 32, 64, 2)
    x = dw_sep(x, 64, 64, 1)
    x = dw_sep(x, 64, 64, 1)
    x = dw_sep(x, 64, 64, 1)
    feats = [(x, 64, 3)]
    x = dw_sep(x, 64, 128, 2)
    x = dw_sep(x, 128, 128, 1)
    x = dw_sep(x, 128, 128, 1)
    feats.append((x, 128, 2))
    x = dw_sep(x, 128, 256, 2)
    x = dw_sep(x, 256, 256, 1)
    feats.append((x, 256, 2))
    x = b.conv(x, 256, 64, 1)
    x = b.conv(b.conv(x, 64, 64, 3, 2, g=64), 64, 256, 1)
    feats.append((x, 256, 3))
    scores, boxes = [], []
    for i, (f, c, a) in enumerate(feats):
        last = i == len(feats) - 1
        sc = head(f, c, a * 2, sep=not last)
        bx = head(f, c, a * 4, sep=not last)
        scores.append(b.op("Reshape", [sc, b.const(np.array([1, -1, 2], np.int64), "s")]))
        boxes.append(b.op("Reshape", [bx, b.const(np.array([1, -1, 4], np.int64), "s")]))
    sc = b.op("Concat", scores, axis=1)
    b.nodes.append(helper.make_node("Softmax", [sc], ["scores"], axis=2))
    b.nodes.append(helper.make_node("Concat", boxes, ["boxes"], axis=1))
    b.save("face_detector", [f32("x", [1, 3, 240, 320])], [f32("scores", [1, 4420, 2]), f32("boxes", [1, 4420, 4])])


def resnet50():
    b = B(4)
    x = b.conv("x", 3, 64, 7, 2)
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for mid, n, s in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        for i in range(n):
            stride = s if i == 0 else 1
            y = b.conv(x, cin, mid, 1)
            y = b.conv(y, mid, mid, 3, stride)
            y = b.conv(y, mid, mid * 4, 1, act=None)
            sc = b.conv(x, cin, mid * 4, 1, stride, act=None) if (stride != 1 or cin != mid * 4) else x
            x = b.op("Relu", [b.op("Add", [y, sc])])
            cin = mid * 4
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])])
    w = b.weight((2048, 1000), 2048)
    b.nodes.append(helper.make_node("Gemm", [x, w, b.const(np.zeros(1000, np.float32))], ["y"]))
    b.save("resnet50", [f32("x", [1, 3, 224, 224])], [f32("y", [1, 1000])])


def transformer(seq=32, d=128, heads=4, ff=512):
    b = B(5)
    hd = d // heads

    def linear(x, i, o):
        return b.op("Add", [b.op("MatMul", [x, b.weight((i, o), i)]), b.const(np.zeros(o, np.float32))])

    def split_heads(t):  # [1, seq, d] -> [1, heads, seq, hd]
        r = b.op("Reshape", [t, b.const(np.array([1, seq, heads, hd], np.int64), "s")])
        return b.op("Transpose", [r], perm=[0, 2, 1, 3])

    q, k, v = (split_heads(linear("x", d, d)) for _ in range(3))
    kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
    att = b.op("Softmax", [b.op("Mul", [b.op("MatMul", [q, kt]), b.const(np.float32(1 / np.sqrt(hd)))])], axis=-1)
    ctx = b.op("Transpose", [b.op("MatMul", [att, v])], perm=[0, 2, 1, 3])
    ctx = b.op("Reshape", [ctx, b.const(np.array([1, seq, d], np.int64), "s")])
    ln_w, ln_b = b.const(np.ones(d, np.float32)), b.const(np.zeros(d, np.float32))
    x1 = b.op("LayerNormalization", [b.op("Add", ["x", linear(ctx, d, d)]), ln_w, ln_b], axis=-1, epsilon=1e-5)
    h = linear(b.op("Relu", [linear(x1, d, ff)]), ff, d)
    b.nodes.append(helper.make_node("LayerNormalization", [b.op("Add", [x1, h]), ln_w, ln_b], ["y"], axis=-1, epsilon=1e-5))
    b.save("transformer_encoder", [f32("x", [1, seq, d])], [f32("y", [1, seq, d])])


def line_detector():
    """A line-segment detector shaped like M-LSD-tiny (Gu et al. 2021) at 320x320: a MobileNetV2
    backbone to 1/16, a decoder that upsamples (Resize, bilinear) and concatenates skips, 3x3 and
    dilated 3x3 convs, and a 16-channel map at 1/2 resolution (Sigmoid on the first 8 channels)."""
    b = B(8)
    x = b.conv("x", 4, 32, 3, 2, act="Relu6")
    skips = {}
    x, cin = inverted_residuals(b, x, 32, [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1)], skips)

    def up(t):
        return b.op("Resize", [t, "", b.const(np.array([1, 1, 2, 2], np.float32), "sc")], mode="linear",
                    coordinate_transformation_mode="half_pixel")

    def block_a(hi, chi, lo, clo, c):  # 1x1 on both, upsample the low-resolution one, concat
        return b.op("Concat", [b.conv(hi, chi, c, 1), up(b.conv(lo, clo, c, 1))], axis=1)

    def block_b(t, c_in, c):
        y = b.conv(b.conv(t, c_in, c, 3), c, c, 3)
        return y

    x = block_b(block_a(skips[32], 32, x, 96, 64), 128, 64)  # 1/8
    x = block_b(block_a(skips[24], 24, x, 64, 64), 128, 64)  # 1/4
    x = block_b(block_a(skips[16], 16, x, 64, 32), 64, 32)   # 1/2
    w = b.weight((32, 32, 3, 3), 32 * 9)
    x = b.op("Relu", [b.op("Conv", [x, w, b.const(np.zeros(32, np.float32), "b")], kernel_shape=[3, 3],
                           pads=[5, 5, 5, 5], dilations=[5, 5])])
    x = b.conv(b.conv(x, 32, 32, 3), 32, 16, 1, act=None)
    heat = b.op("Slice", [x, b.const(np.array([0], np.int64), "s"), b.const(np.array([8], np.int64), "s"),
                          b.const(np.array([1], np.int64), "s")])
    rest = b.op("Slice", [x, b.const(np.array([8], np.int64), "s"), b.const(np.array([16], np.int64), "s"),
                          b.const(np.array([1], np.int64), "s")])
    b.nodes.append(helper.make_node("Concat", [b.op("Sigmoid", [heat]), rest], ["y"], axis=1))
    b.save("line_detector", [f32("x", [1, 4, 320, 320])], [f32("y", [1, 16, 160, 160])])


def transformer_gelu(seq=64, d=256, heads=8, ff=1024):
    """A BERT-style encoder layer as exporters write it: LayerNorm decomposed (ReduceMean, Sub,
    Pow, Sqrt, Div, affine), GELU with Erf, attention scaled by a Div, biases on every MatMul."""
    b = B(9)
    hd = d // heads

    def linear(x, i, o):
        bias = (b.rng.standard_normal(o) * 0.02).astype(np.float32)
        return b.op("Add", [b.op("MatMul", [x, b.weight((i, o), i)]), b.const(bias)])

    def layer_norm(x):
        c = b.op("Sub", [x, b.op("ReduceMean", [x], axes=[-1])])
        var = b.op("ReduceMean", [b.op("Pow", [c, b.const(np.float32(2.0))])], axes=[-1])
        n = b.op("Div", [c, b.op("Sqrt", [b.op("Add", [var, b.const(np.float32(1e-5))])])])
        gamma = (1 + 0.1 * b.rng.standard_normal(d)).astype(np.float32)
        beta = (0.1 * b.rng.standard_normal(d)).astype(np.float32)
        return b.op("Add", [b.op("Mul", [n, b.const(gamma)]), b.const(beta)])

    def gelu(x):
        e = b.op("Erf", [b.op("Div", [x, b.const(np.float32(np.sqrt(2.0)))])])
        return b.op("Mul", [b.op("Mul", [x, b.op("Add", [e, b.const(np.float32(1.0))])]), b.const(np.float32(0.5))])

    def split_heads(t):
        r = b.op("Reshape", [t, b.const(np.array([1, seq, heads, hd], np.int64), "s")])
        return b.op("Transpose", [r], perm=[0, 2, 1, 3])

    q, k, v = (split_heads(linear("x", d, d)) for _ in range(3))
    kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
    att = b.op("Softmax", [b.op("Div", [b.op("MatMul", [q, kt]), b.const(np.float32(np.sqrt(hd)))])], axis=-1)
    ctx = b.op("Transpose", [b.op("MatMul", [att, v])], perm=[0, 2, 1, 3])
    ctx = b.op("Reshape", [ctx, b.const(np.array([1, seq, d], np.int64), "s")])
    x1 = layer_norm(b.op("Add", ["x", linear(ctx, d, d)]))
    h = linear(gelu(linear(x1, d, ff)), ff, d)
    b.nodes.append(helper.make_node("Identity", [layer_norm(b.op("Add", [x1, h]))], ["y"]))
    b.save("transformer_gelu", [f32("x", [1, seq, d])], [f32("y", [1, seq, d])])


makers = {
    "mlp_64_128_128_10": lambda: mlp("mlp_64_128_128_10", [64, 128, 128, 10]),
    "mlp_256_1024_1024_256": lambda: mlp("mlp_256_1024_1024_256", [256, 1024, 1024, 256]),
    "one_node_relu": relu_1node,
    "mobilenetv2": mobilenetv2,
    "mobilenetv3": mobilenetv3,
    "face_detector": face_detector,
    "line_detector": line_detector,
    "resnet50": resnet50,
    "transformer_encoder": transformer,
    "transformer_gelu": transformer_gelu,
}
for name, make in makers.items():
    if not os.path.exists(os.path.join(out_dir, name + ".onnx")):
        make()
        print(f"make_models: wrote {name}.onnx", file=sys.stderr)
