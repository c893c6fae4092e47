#!/usr/bin/python3
"""Writes the PyTorch-exported benchmark models (random weights, fixed seed) into .cache/models/:
the graphs exactly as torch.onnx.export (Debian's python3-torch 1.13, opset 17) writes them, the
way most users' models reach Jiffy. Their op patterns differ from make_models.py's hand-written
graphs: batch_first attention transposes [1, S, D] -> [S, 1, D] around the QKV projection, SiLU is
Mul(x, Sigmoid(x)), BatchNorm, HardSwish and LayerNormalization come as torch writes them.
  torch_encoder          nn.TransformerEncoderLayer(128, 4, 512, batch_first=True), x [1, 32, 128]
  torch_encoder_b2       the same layer on a batch of 2, x [2, 32, 128] (the batch-first transposes
                         then move real rows)
  torch_encoder_gelu     nn.TransformerEncoderLayer(256, 8, 1024, activation="gelu",
                         norm_first=True, batch_first=True), x [1, 64, 256]
  torch_mobilenetv3      torchvision mobilenet_v3_large, x [1, 3, 224, 224]
  torch_efficientnet_b0  torchvision efficientnet_b0 (SiLU, squeeze-excite), x [1, 3, 224, 224]
  torch_yolo             a YOLOv8-style detector (Conv-BN-SiLU, C2f splits, SPPF max pools,
                         nearest upsampling, concatenations), images [1, 3, 320, 320]
BatchNorm running statistics are randomized so that folding them is exercised. Rows for them are
in scripts/generated_models.tsv. Idempotent: skips files that exist."""
import os
import sys

out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".cache", "models")
names = ["torch_encoder", "torch_encoder_b2", "torch_encoder_gelu", "torch_mobilenetv3", "torch_efficientnet_b0",
         "torch_yolo"]
if all(os.path.exists(os.path.join(out_dir, n + ".onnx")) for n in names):
    sys.exit(0)

import warnings  # noqa: E402

warnings.filterwarnings("ignore")
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torchvision  # noqa: E402

os.makedirs(out_dir, exist_ok=True)


def cbs(ci, co, k=3, s=1):
    return nn.Sequential(nn.Conv2d(ci, co, k, s, k // 2, bias=False), nn.BatchNorm2d(co), nn.SiLU())


class C2f(nn.Module):
    def __init__(self, ci, co, n=1):
        super().__init__()
        self.c = co // 2
        self.cv1 = cbs(ci, 2 * self.c, 1)
        self.m = nn.ModuleList(nn.Sequential(cbs(self.c, self.c), cbs(self.c, self.c)) for _ in range(n))
        self.cv2 = cbs((2 + n) * self.c, co, 1)

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(y[-1] + m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.cv1, self.cv2, self.m = cbs(c, c // 2, 1), cbs(c * 2, c, 1), nn.MaxPool2d(5, 1, 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat([x, y1, y2, self.m(y2)], 1))


class Yolo(nn.Module):
    def __init__(self):
        super().__init__()
        self.b1 = nn.Sequential(cbs(3, 16, 3, 2), cbs(16, 32, 3, 2), C2f(32, 32), cbs(32, 64, 3, 2), C2f(64, 64, 2))
        self.b2 = nn.Sequential(cbs(64, 128, 3, 2), C2f(128, 128, 2))
        self.b3 = nn.Sequential(cbs(128, 256, 3, 2), C2f(256, 256), SPPF(256))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.h1, self.h2 = C2f(256 + 128, 128), C2f(128 + 64, 64)
        self.o1, self.o2 = nn.Conv2d(64, 65, 1), nn.Conv2d(128, 65, 1)

    def forward(self, x):
        p3 = self.b1(x)
        p4 = self.b2(p3)
        p5 = self.b3(p4)
        t = self.h1(torch.cat([self.up(p5), p4], 1))
        u = self.h2(torch.cat([self.up(t), p3], 1))
        big = F.interpolate(self.o2(t), scale_factor=2.0, mode="nearest")
        return torch.cat([self.o1(u).flatten(2), big.flatten(2)], 2).sigmoid()


def save(name, make, shape, input_name="x"):
    path = os.path.join(out_dir, name + ".onnx")
    if os.path.exists(path):
        return
    torch.manual_seed(0)
    model = make().eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    # Exported with autograd on: under no_grad, nn.TransformerEncoderLayer takes its fused fast path
    # (aten::_transformer_encoder_layer_fwd), which has no ONNX export.
    torch.onnx.export(model, (torch.rand(*shape) * 2 - 1,), path + ".tmp", input_names=[input_name],
                      opset_version=17, do_constant_folding=True)
    os.replace(path + ".tmp", path)
    print(f"make_torch_models: wrote {name}.onnx", file=sys.stderr)


save("torch_encoder", lambda: nn.TransformerEncoderLayer(128, 4, 512, dropout=0.0, batch_first=True), (1, 32, 128))
save("torch_encoder_b2", lambda: nn.TransformerEncoderLayer(128, 4, 512, dropout=0.0, batch_first=True), (2, 32, 128))
save("torch_encoder_gelu", lambda: nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.0, activation="gelu",
                                                              norm_first=True, batch_first=True), (1, 64, 256))
save("torch_mobilenetv3", torchvision.models.mobilenet_v3_large, (1, 3, 224, 224))
save("torch_efficientnet_b0", torchvision.models.efficientnet_b0, (1, 3, 224, 224))
save("torch_yolo", Yolo, (1, 3, 320, 320), "images")
