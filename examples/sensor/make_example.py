#!/usr/bin/python3
"""Writes the sensor example's model and data (run with /usr/bin/python3, which has onnx/numpy).

spike.onnx: x [1, 8, 1] (the last 8 temperature readings, oldest first) -> score [1, 1] =
sigmoid(2 * (x[7] - mean(x[0..6])) - 6): near 1 when the newest reading jumps ~3+ degrees above
the recent average. sensor.csv: 200 readings at 10 Hz, a slow drift with two spikes.
"""
import numpy as np
import onnx
from onnx import helper, TensorProto, numpy_helper
import os

here = os.path.dirname(os.path.abspath(__file__))
w = np.full((8, 1), -2.0 / 7.0, dtype=np.float32)
w[7, 0] = 2.0
b = np.array([-6.0], dtype=np.float32)
g = helper.make_graph(
    [helper.make_node("Reshape", ["x", "shape"], ["flat"]),
     helper.make_node("Gemm", ["flat", "w", "b"], ["logit"]),
     helper.make_node("Sigmoid", ["logit"], ["score"])],
    "spike",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 1])],
    [helper.make_tensor_value_info("score", TensorProto.FLOAT, [1, 1])],
    [numpy_helper.from_array(np.array([1, 8], dtype=np.int64), "shape"),
     numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
onnx.checker.check_model(m)
onnx.save(m, os.path.join(here, "spike.onnx"))

rng = np.random.default_rng(7)
t = np.arange(200) / 10.0
temp = 21.0 + 0.02 * np.arange(200) + rng.normal(0, 0.1, 200)
temp[60:63] += 6.0   # a spike at t = 6.0 s
temp[150:152] += 8.0  # another at t = 15.0 s
with open(os.path.join(here, "sensor.csv"), "w") as f:
    f.write("time_s,temp_c\n")
    for a, b in zip(t, temp):
        f.write(f"{a:.1f},{b:.3f}\n")
