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
# t_resnet18, t_regnet, t_shufflenet, t_squeezenet, t_mnasnet, t_densenet, t_convnext
#             torchvision CNNs at 224x224 (ResNet-18, RegNetY-400MF, ShuffleNetV2 x1.0,
#             SqueezeNet 1.1, MNASNet 1.0, DenseNet-121, ConvNeXt-Tiny): the session 27 set
import os
import sys

import numpy as np
import torch
import torch.nn as nn
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
}
for name, ctor in [("t_resnet18", "resnet18"), ("t_regnet", "regnet_y_400mf"), ("t_shufflenet", "shufflenet_v2_x1_0"),
                   ("t_squeezenet", "squeezenet1_1"), ("t_mnasnet", "mnasnet1_0"), ("t_densenet", "densenet121"),
                   ("t_convnext", "convnext_tiny")]:
    models[name] = (lambda n, c: lambda: save(n, getattr(torchvision.models, c)(), [(1, 3, 224, 224)]))(name, ctor)
for name in sys.argv[1:] or list(models):
    if name not in models:
        sys.exit(f"make_probe_models.py: unknown model '{name}' (have: {', '.join(models)})")
    models[name]()
