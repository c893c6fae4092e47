# Writes OUT/model.onnx: y = Relu(x @ W1) @ W2 ... repeated LAYERS times, x of shape [N, D] with a
# symbolic batch dim N (the server compiles a plan per batch size). Deterministic weights.
# usage: make_batch_model.py OUT D LAYERS
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out, d, layers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(3)
w = numpy_helper.from_array((rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32), "W")
nodes, prev = [], "x"
for i in range(layers):
    nodes.append(helper.make_node("MatMul", [prev, "W"], [f"m{i}"]))
    nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}" if i + 1 < layers else "y"]))
    prev = f"r{i}"
g = helper.make_graph(nodes, "batch", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", d])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", d])], [w])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
onnx.checker.check_model(m)
onnx.save(m, out + "/model.onnx")
