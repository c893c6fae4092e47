#!/usr/bin/python3
# Models like the reviewer's unseen ones, for `build/jiffy_vs_ort --model NAME` (not tracked, not
# in the test suite): PyTorch exports (Debian's python3-torch 1.13 / torchvision, random weights,
# fixed seed) written to .cache/models/NAME.onnx with their inputs in .cache/refs/NAME/
# (inputs.txt + input_i.npy, uniform [-1, 1)). jiffy_vs_ort runs ONNX Runtime on the same
# inputs, so no reference outputs are needed.
#   /usr/bin/python3 scripts/make_probe_models.py [NAME...]   (default: all)
# v_crnn      text recognizer: conv stack, bidirectional LSTM, CTC head (PP-OCRv2-style CRNN)
# v_kws       keyword spotter: Conv1d residual blocks, kernel 9 (TC-ResNet-like) on 40 x 98 MFCCs
# v_dscnn     keyword spotter: "Hello Edge" DS-CNN (10x4 stride-2 conv, 4 depthwise-separable blocks)
# v_gru       wake-word head: GRU over 16 x 96 embeddings
# v_ultra     face detector like UltraFace-slim (depthwise blocks, three heads, softmax), 240x320
# v_postln    nn.TransformerEncoderLayer(192, 6, 768), post-LN, 100 tokens
# v_enc2      two pre-LN GELU layers (256, 4 heads, 1024), 32 tokens
# v_mlpg      MLP 256-1024-1024-256 with GELUs
# v_mnv3l     torchvision MobileNetV3-Large
# v_enc_op13  v_postln's layer at opset 13, 50 tokens
# v_retina    face detector like RetinaFace-MobileNet-0.25 (LeakyReLU, FPN with nearest Resize + Add,
#             SSH Concats, softmax), 240x320
# v_svtr      text recognizer like PP-OCRv3's SVTR (stride-(2,1) convs, one attention block, a
#             160 x 6625 CTC head with Softmax), 48x320
# v_blaze     face detector like MediaPipe BlazeFace (front): 5x5 depthwise blocks, stride 2 by an
#             asymmetric Pad, max-pooled skips with channels padded by Pad, two heads, 128x128
# v_mlsd      line detector like M-LSD-tiny: MobileNetV2 features, bilinear align_corners upsampling
#             and Concat, a dilation-5 block, 16 maps upsampled to 320x320
# v_yunet     face detector like libfacedetection's YuNet: 1x1 + depthwise units, MaxPools between
#             stages, nearest upsample-and-add neck, 12 outputs (cls / obj / bbox / kps), 320x320
# v_tfsame    TF-style "same" strides as PyTorch writes them (F.pad right / bottom + unpadded stride-2
#             stem and depthwise convs): the Pad fold's asymmetric pads through stem, band and 1x1s
# v_causal    causal Conv1d stack (F.pad(x, (k - 1, 0)): 1-D Winograd, dilated, depthwise, strided)
# t_resnet18, t_regnet, t_shufflenet, t_squeezenet, t_mnasnet, t_densenet, t_convnext
#             torchvision CNNs at 224x224 (ResNet-18, RegNetY-400MF, ShuffleNetV2 x1.0,
#             SqueezeNet 1.1, MNASNet 1.0, DenseNet-121, ConvNeXt-Tiny): the session 27 set
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".cache")
torch.manual_seed(0)


def save(name, model, shapes, opset=17):
    model.eval()
    xs = tuple(torch.rand(*s) * 2 - 1 for s in shapes)
    names = [f"x{i}" for i in range(len(xs))]
    os.makedirs(f"{root}/models", exist_ok=True)
    torch.onnx.export(model, xs, f"{root}/models/{name}.onnx", input_names=names, opset_version=opset)
    d = f"{root}/refs/{name}"
    os.makedirs(d, exist_ok=True)
    lines = []
    for i, (n, x) in enumerate(zip(names, xs)):
        np.save(f"{d}/input_{i}.npy", x.numpy())
        lines.append(f"{n}=input_{i}.npy")
    open(f"{d}/inputs.txt", "w").write("\n".join(lines) + "\n")
    print(name)


class CRNN(nn.Module):
    def __init__(s):
        super().__init__()

        def cbr(i, o):
            return [nn.Conv2d(i, o, 3, 1, 1), nn.BatchNorm2d(o), nn.ReLU()]

        s.cnn = nn.Sequential(*cbr(1, 32), nn.MaxPool2d(2), *cbr(32, 64), nn.MaxPool2d(2), *cbr(64, 128),
                              *cbr(128, 128), nn.MaxPool2d((2, 1)), *cbr(128, 256), nn.MaxPool2d((4, 1)))
        s.rnn = nn.LSTM(256, 128, bidirectional=True, batch_first=True)
        s.fc = nn.Linear(256, 97)

    def forward(s, x):
        y, _ = s.rnn(s.cnn(x).squeeze(2).permute(0, 2, 1))
        return s.fc(y).log_softmax(-1)


class KWS(nn.Module):
    def __init__(s):
        super().__init__()
        s.c0 = nn.Conv1d(40, 64, 3, padding=1, bias=False)
        s.blocks = nn.ModuleList()
        for i, o, st in [(64, 64, 1), (64, 96, 2), (96, 96, 1), (96, 128, 2)]:
            s.blocks.append(nn.ModuleDict(dict(
                a=nn.Conv1d(i, o, 9, st, 4, bias=False), ba=nn.BatchNorm1d(o),
                b=nn.Conv1d(o, o, 9, 1, 4, bias=False), bb=nn.BatchNorm1d(o),
                s=nn.Conv1d(i, o, 1, st, bias=False) if (i != o or st != 1) else nn.Identity())))
        s.fc = nn.Linear(128, 12)

    def forward(s, x):
        x = s.c0(x)
        for b in s.blocks:
            y = b["bb"](b["b"](torch.relu(b["ba"](b["a"](x)))))
            x = torch.relu(y + b["s"](x))
        return torch.softmax(s.fc(x.mean(-1)), -1)


class GRUHead(nn.Module):
    def __init__(s):
        super().__init__()
        s.g = nn.GRU(96, 64, batch_first=True)
        s.fc = nn.Linear(64, 1)

    def forward(s, x):
        _, h = s.g(x)
        return torch.sigmoid(s.fc(h[-1]))


class Ultra(nn.Module):
    def __init__(s):
        super().__init__()

        def cbr(i, o, st):
            return nn.Sequential(nn.Conv2d(i, o, 3, st, 1, bias=False), nn.BatchNorm2d(o), nn.ReLU())

        def dw(i, o, st):
            return nn.Sequential(nn.Conv2d(i, i, 3, st, 1, groups=i, bias=False), nn.BatchNorm2d(i), nn.ReLU(),
                                 nn.Conv2d(i, o, 1, bias=False), nn.BatchNorm2d(o), nn.ReLU())

        s.s1 = nn.Sequential(cbr(3, 16, 2), dw(16, 32, 1), dw(32, 32, 2), dw(32, 32, 1), dw(32, 64, 2),
                             dw(64, 64, 1), dw(64, 64, 1))
        s.s2 = nn.Sequential(dw(64, 128, 2), dw(128, 128, 1), dw(128, 128, 1))
        s.s3 = nn.Sequential(dw(128, 256, 2), dw(256, 256, 1))
        s.h = nn.ModuleList([nn.Conv2d(c, 18, 3, 1, 1) for c in (64, 128, 256)])

    def forward(s, x):
        a = s.s1(x)
        b = s.s2(a)
        c = s.s3(b)
        o = torch.cat([h(t).permute(0, 2, 3, 1).reshape(1, -1, 6) for h, t in zip(s.h, (a, b, c))], 1)
        return torch.softmax(o[:, :, :2], -1), o[:, :, 2:]


class DSCNN(nn.Module):  # "Hello Edge" DS-CNN keyword spotter on 49 x 10 MFCCs
    def __init__(s):
        super().__init__()
        s.c0 = nn.Sequential(nn.Conv2d(1, 64, (10, 4), (2, 2), (5, 1)), nn.BatchNorm2d(64), nn.ReLU())
        blocks = []
        for _ in range(4):
            blocks += [nn.Conv2d(64, 64, 3, 1, 1, groups=64), nn.BatchNorm2d(64), nn.ReLU(),
                       nn.Conv2d(64, 64, 1), nn.BatchNorm2d(64), nn.ReLU()]
        s.blocks = nn.Sequential(*blocks)
        s.fc = nn.Linear(64, 12)

    def forward(s, x):
        return torch.softmax(s.fc(s.blocks(s.c0(x)).mean((2, 3))), -1)


def post_ln():
    return nn.TransformerEncoderLayer(192, 6, 768, dropout=0.0, batch_first=True)


def cbl(i, o, s=1, k=3, leaky=0.1):
    return nn.Sequential(nn.Conv2d(i, o, k, s, k // 2, bias=False), nn.BatchNorm2d(o), nn.LeakyReLU(leaky))


def dw(i, o, s):
    return nn.Sequential(nn.Conv2d(i, i, 3, s, 1, groups=i, bias=False), nn.BatchNorm2d(i), nn.LeakyReLU(0.1),
                         nn.Conv2d(i, o, 1, 1, 0, bias=False), nn.BatchNorm2d(o), nn.LeakyReLU(0.1))


class SSH(nn.Module):  # RetinaFace's context module: 3x3, 5x5 and 7x7 receptive fields, concatenated
    def __init__(s, i, o):
        super().__init__()
        s.a = nn.Sequential(nn.Conv2d(i, o // 2, 3, 1, 1), nn.BatchNorm2d(o // 2))
        s.b1 = cbl(i, o // 4, leaky=0.0)
        s.b2 = nn.Sequential(nn.Conv2d(o // 4, o // 4, 3, 1, 1), nn.BatchNorm2d(o // 4))
        s.c2 = cbl(o // 4, o // 4, leaky=0.0)
        s.c3 = nn.Sequential(nn.Conv2d(o // 4, o // 4, 3, 1, 1), nn.BatchNorm2d(o // 4))

    def forward(s, x):
        b = s.b1(x)
        return F.relu(torch.cat([s.a(x), s.b2(b), s.c3(s.c2(b))], 1))


class Retina(nn.Module):  # RetinaFace-MobileNet-0.25-like: backbone, FPN, SSH, class / box heads
    def __init__(s):
        super().__init__()
        s.s1 = nn.Sequential(cbl(3, 8, 2), dw(8, 16, 1), dw(16, 32, 2), dw(32, 32, 1), dw(32, 64, 2), dw(64, 64, 1))
        s.s2 = nn.Sequential(dw(64, 128, 2), *[dw(128, 128, 1) for _ in range(5)])
        s.s3 = nn.Sequential(dw(128, 256, 2), dw(256, 256, 1))
        s.o1, s.o2, s.o3 = cbl(64, 64, k=1), cbl(128, 64, k=1), cbl(256, 64, k=1)
        s.m1, s.m2 = cbl(64, 64), cbl(64, 64)
        s.ssh = nn.ModuleList([SSH(64, 64) for _ in range(3)])
        s.cls = nn.ModuleList([nn.Conv2d(64, 4, 1) for _ in range(3)])
        s.box = nn.ModuleList([nn.Conv2d(64, 8, 1) for _ in range(3)])

    def forward(s, x):
        c1 = s.s1(x)
        c2 = s.s2(c1)
        c3 = s.s3(c2)
        p3, p2, p1 = s.o3(c3), s.o2(c2), s.o1(c1)
        p2 = s.m2(p2 + F.interpolate(p3, size=p2.shape[2:], mode="nearest"))
        p1 = s.m1(p1 + F.interpolate(p2, size=p1.shape[2:], mode="nearest"))
        fs = [s.ssh[0](p1), s.ssh[1](p2), s.ssh[2](p3)]
        cl = torch.cat([s.cls[i](f).permute(0, 2, 3, 1).reshape(1, -1, 2) for i, f in enumerate(fs)], 1)
        bx = torch.cat([s.box[i](f).permute(0, 2, 3, 1).reshape(1, -1, 4) for i, f in enumerate(fs)], 1)
        return F.softmax(cl, -1), bx


class SVTR(nn.Module):  # PP-OCRv3-rec-like: conv stem (strides (2, 1)), one attention block over the width, CTC head
    def __init__(s, d=120):
        super().__init__()

        def cbh(i, o, st):
            return [nn.Conv2d(i, o, 3, st, 1), nn.BatchNorm2d(o), nn.Hardswish()]

        s.cnn = nn.Sequential(*cbh(3, 32, 2), *cbh(32, 64, (2, 1)), *cbh(64, d, (2, 1)), *cbh(d, d, (2, 1)))
        s.ln1, s.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        s.qkv, s.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        s.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.Hardswish(), nn.Linear(2 * d, d))
        s.h = 8
        s.fc = nn.Linear(d, 6625)

    def forward(s, x):
        f = F.adaptive_avg_pool2d(s.cnn(x), (1, None)).squeeze(2).permute(0, 2, 1)  # 1 x W x d
        B, T, D = f.shape
        q, k, v = s.qkv(s.ln1(f)).reshape(B, T, 3, s.h, D // s.h).permute(2, 0, 3, 1, 4)
        a = (q @ k.transpose(-2, -1)) * (D // s.h) ** -0.5
        f = f + s.proj((a.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D))
        f = f + s.mlp(s.ln2(f))
        return s.fc(f).softmax(-1)


class BlazeBlock(nn.Module):  # BlazeFace's block: 5x5 depthwise + 1x1; stride 2 pads right / bottom,
    def __init__(s, i, o, st=1):  # the skip max-pools and pads its channels with zeros
        super().__init__()
        s.st, s.pad = st, o - i
        s.dw = nn.Conv2d(i, i, 5, st, 0 if st == 2 else 2, groups=i)
        s.pw = nn.Conv2d(i, o, 1)

    def forward(s, x):
        h = F.pad(x, (1, 2, 1, 2)) if s.st == 2 else x
        skip = F.max_pool2d(x, 2) if s.st == 2 else x
        if s.pad:
            skip = F.pad(skip, (0, 0, 0, 0, 0, s.pad))
        return F.relu(s.pw(s.dw(h)) + skip)


class Blaze(nn.Module):  # MediaPipe BlazeFace (front, 128x128)-like: two outputs (scores, boxes) over 896 anchors
    def __init__(s):
        super().__init__()
        s.stem = nn.Sequential(nn.Conv2d(3, 24, 5, 2, 2), nn.ReLU())
        s.b1 = nn.Sequential(BlazeBlock(24, 24), BlazeBlock(24, 28), BlazeBlock(28, 32, 2), BlazeBlock(32, 36),
                             BlazeBlock(36, 42), BlazeBlock(42, 48, 2), BlazeBlock(48, 56), BlazeBlock(56, 64),
                             BlazeBlock(64, 72), BlazeBlock(72, 80), BlazeBlock(80, 88))
        s.b2 = nn.Sequential(BlazeBlock(88, 96, 2), BlazeBlock(96, 96), BlazeBlock(96, 96), BlazeBlock(96, 96),
                             BlazeBlock(96, 96))
        s.c1, s.c2 = nn.Conv2d(88, 2, 1), nn.Conv2d(96, 6, 1)
        s.r1, s.r2 = nn.Conv2d(88, 32, 1), nn.Conv2d(96, 96, 1)

    def forward(s, x):
        a = s.b1(s.stem(x))
        b = s.b2(a)
        c = torch.cat([s.c1(a).permute(0, 2, 3, 1).reshape(1, -1, 1), s.c2(b).permute(0, 2, 3, 1).reshape(1, -1, 1)], 1)
        r = torch.cat([s.r1(a).permute(0, 2, 3, 1).reshape(1, -1, 16), s.r2(b).permute(0, 2, 3, 1).reshape(1, -1, 16)], 1)
        return torch.sigmoid(c), r


class MLSD(nn.Module):  # M-LSD-tiny-like line detector: MobileNetV2 features, bilinear (align_corners)
    def __init__(s):     # upsampling + Concat decoder, a dilated block, 16 maps at half resolution
        super().__init__()
        f = torchvision.models.mobilenet_v2().features
        s.f1, s.f2, s.f3 = f[:4], f[:7], f[7:14]  # 1/4 (24), 1/8 (32), 1/16 (96)

        def cbr(i, o, k=3, d=1):
            return nn.Sequential(nn.Conv2d(i, o, k, 1, d * (k // 2), dilation=d), nn.BatchNorm2d(o), nn.ReLU())

        s.a1, s.a2 = nn.Sequential(cbr(32, 64, 1)), nn.Sequential(cbr(96, 64, 1))
        s.b1 = nn.Sequential(cbr(128, 64), cbr(64, 64))
        s.a3, s.a4 = cbr(24, 64, 1), cbr(64, 64, 1)
        s.b2 = nn.Sequential(cbr(128, 64), cbr(64, 64))
        s.c = nn.Sequential(cbr(64, 64, 3, 5), cbr(64, 64), nn.Conv2d(64, 16, 1))

    def forward(s, x):
        c1 = s.f1(x)
        c2 = s.f2[4:](c1)
        c3 = s.f3(c2)
        up = lambda t, r: F.interpolate(t, size=r.shape[2:], mode="bilinear", align_corners=True)
        d = s.b1(torch.cat([s.a1(c2), up(s.a2(c3), c2)], 1))
        d = s.b2(torch.cat([s.a3(c1), up(s.a4(d), c1)], 1))
        d = s.c(d)
        return F.interpolate(d, scale_factor=2.0, mode="bilinear", align_corners=True)


class DPUnit(nn.Module):  # YuNet's ConvDPUnit: 1x1 (no activation), then depthwise 3x3 + BN + ReLU
    def __init__(s, i, o, act=True):
        super().__init__()
        s.c1 = nn.Conv2d(i, o, 1)
        s.c2 = nn.Sequential(nn.Conv2d(o, o, 3, 1, 1, groups=o), nn.BatchNorm2d(o), *([nn.ReLU()] if act else []))

    def forward(s, x):
        return s.c2(s.c1(x))


class YuNet(nn.Module):  # libfacedetection's YuNet-like: MaxPools between stages, an upsample-and-add
    def __init__(s):     # neck, 12 outputs (cls / obj / bbox / kps at strides 8, 16, 32), 320x320
        super().__init__()
        s.head = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(), DPUnit(16, 16))
        s.s1 = nn.Sequential(DPUnit(16, 16), DPUnit(16, 64))
        s.s2 = nn.Sequential(DPUnit(64, 64), DPUnit(64, 64))
        s.s3 = nn.Sequential(DPUnit(64, 64), DPUnit(64, 64))
        s.s4 = nn.Sequential(DPUnit(64, 64), DPUnit(64, 64))
        s.n1, s.n2, s.n3 = DPUnit(64, 64), DPUnit(64, 64), DPUnit(64, 64)
        s.heads = nn.ModuleList([nn.ModuleList([DPUnit(64, c, False) for c in (1, 1, 4, 10)]) for _ in range(3)])

    def forward(s, x):
        x = F.max_pool2d(s.head(x), 2)
        x = F.max_pool2d(s.s1(x), 2)
        p3 = s.s2(x)
        p4 = s.s3(F.max_pool2d(p3, 2))
        p5 = s.s4(F.max_pool2d(p4, 2))
        p5 = s.n3(p5)
        p4 = s.n2(p4 + F.interpolate(p5, scale_factor=2.0, mode="nearest"))
        p3 = s.n1(p3 + F.interpolate(p4, scale_factor=2.0, mode="nearest"))
        out = []
        for f, hs in zip((p3, p4, p5), s.heads):
            c, o, b, k = (h(f).permute(0, 2, 3, 1).reshape(1, -1, h.c1.out_channels) for h in hs)
            out += [torch.sigmoid(c), torch.sigmoid(o), b, k]
        return tuple(out)


class TfSame(nn.Module):  # TF-style "same" strides exported from PyTorch: F.pad right / bottom, unpadded convs
    def __init__(s):
        super().__init__()
        s.stem = nn.Conv2d(3, 16, 3, 2, 0)
        s.e1, s.d1, s.p1 = nn.Conv2d(16, 96, 1), nn.Conv2d(96, 96, 3, 2, 0, groups=96), nn.Conv2d(96, 24, 1)
        s.e2, s.d2, s.p2 = nn.Conv2d(24, 144, 1), nn.Conv2d(144, 144, 5, 2, 0, groups=144), nn.Conv2d(144, 32, 1)

    def forward(s, x):
        x = F.relu(s.stem(F.pad(x, (0, 1, 0, 1))))
        x = s.p1(F.relu(s.d1(F.pad(F.relu(s.e1(x)), (0, 1, 0, 1)))))
        return s.p2(F.relu(s.d2(F.pad(F.relu(s.e2(x)), (1, 2, 1, 2)))))


class Causal(nn.Module):  # causal Conv1d stack (TCN-style keyword spotter): F.pad(x, (k - 1, 0)) before each conv
    def __init__(s):
        super().__init__()
        s.a, s.b = nn.Conv1d(40, 64, 3), nn.Conv1d(64, 64, 5, dilation=2)
        s.c, s.d = nn.Conv1d(64, 64, 9, groups=64), nn.Conv1d(64, 32, 3, stride=2)

    def forward(s, x):
        x = F.relu(s.a(F.pad(x, (2, 0))))
        x = F.relu(s.b(F.pad(x, (8, 0))))
        x = F.relu(s.c(F.pad(x, (8, 0))))
        return s.d(F.pad(x, (0, 1)))


def enc2():
    layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, activation="gelu", batch_first=True,
                                       norm_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


models = {
    "v_crnn": lambda: save("v_crnn", CRNN(), [(1, 1, 32, 128)]),
    "v_kws": lambda: save("v_kws", KWS(), [(1, 40, 98)]),
    "v_dscnn": lambda: save("v_dscnn", DSCNN(), [(1, 1, 49, 10)]),
    "v_gru": lambda: save("v_gru", GRUHead(), [(1, 16, 96)]),
    "v_ultra": lambda: save("v_ultra", Ultra(), [(1, 3, 240, 320)]),
    "v_postln": lambda: save("v_postln", post_ln(), [(1, 100, 192)]),
    "v_enc2": lambda: save("v_enc2", enc2(), [(1, 32, 256)]),
    "v_mlpg": lambda: save("v_mlpg", nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024),
                                                   nn.GELU(), nn.Linear(1024, 256)), [(1, 256)]),
    "v_mnv3l": lambda: save("v_mnv3l", torchvision.models.mobilenet_v3_large(), [(1, 3, 224, 224)]),
    "v_enc_op13": lambda: save("v_enc_op13", post_ln(), [(1, 50, 192)], opset=13),
    "v_retina": lambda: save("v_retina", Retina(), [(1, 3, 240, 320)]),
    "v_svtr": lambda: save("v_svtr", SVTR(), [(1, 3, 48, 320)]),
    "v_blaze": lambda: save("v_blaze", Blaze(), [(1, 3, 128, 128)]),
    "v_mlsd": lambda: save("v_mlsd", MLSD(), [(1, 3, 320, 320)]),
    "v_yunet": lambda: save("v_yunet", YuNet(), [(1, 3, 320, 320)]),
    "v_tfsame": lambda: save("v_tfsame", TfSame(), [(1, 3, 224, 224)]),
    "v_causal": lambda: save("v_causal", Causal(), [(1, 40, 101)]),
}
for name, ctor in [("t_resnet18", "resnet18"), ("t_regnet", "regnet_y_400mf"), ("t_shufflenet", "shufflenet_v2_x1_0"),
                   ("t_squeezenet", "squeezenet1_1"), ("t_mnasnet", "mnasnet1_0"), ("t_densenet", "densenet121"),
                   ("t_convnext", "convnext_tiny")]:
    models[name] = (lambda n, c: lambda: save(n, getattr(torchvision.models, c)(), [(1, 3, 224, 224)]))(name, ctor)
for name in sys.argv[1:] or list(models):
    if name not in models:
        sys.exit(f"make_probe_models.py: unknown model '{name}' (have: {', '.join(models)})")
    models[name]()
