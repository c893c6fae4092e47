#!/usr/bin/python3
"""Writes the bad models that cli_test.sh feeds to `jiffy run` (each must give exit code 2 and a
clear message). Usage: make_bad_models.py OUT_DIR REAL_MODEL.onnx"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out, real = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)


def save(name, model):
    with open(os.path.join(out, name), "wb") as f:
        f.write(model.SerializeToString())


def model(nodes, inputs, outputs, inits=(), opset=13):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)

open(os.path.join(out, "empty.onnx"), "wb").close()
data = open(real, "rb").read()
open(os.path.join(out, "truncated.onnx"), "wb").write(data[: len(data) // 2])
rng = np.random.default_rng(7)
open(os.path.join(out, "random.onnx"), "wb").write(bytes([0x0A, 0xFF, 0xFF]) + rng.bytes(4093))

neg = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[-3, 2], raw_data=b"")
save("negative_dim.onnx", model([helper.make_node("Add", ["x", "w"], ["y"])], [X], [Y], [neg]))

huge = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 20, 1 << 20, 1 << 10], raw_data=b"\0" * 16)
save("huge_dim.onnx", model([helper.make_node("Add", ["x", "w"], ["y"])], [X], [Y], [huge]))

short = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3], raw_data=b"\0" * 8)
save("short_raw_data.onnx", model([helper.make_node("Add", ["x", "w"], ["y"])], [X], [Y], [short]))

neg_in = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-2, 3])
save("negative_input_dim.onnx", model([helper.make_node("Relu", ["x"], ["y"])], [neg_in], [Y]))

# Gather with an index that is only known at run time to be out of range.
IDX = helper.make_tensor_value_info("i", TensorProto.INT64, [1])
save("gather_oob.onnx", model([helper.make_node("Gather", ["x", "i"], ["y"], axis=0)], [X, IDX], [Y]))
np.save(os.path.join(out, "idx_oob.npy"), np.array([5], dtype=np.int64))

save("cycle.onnx", model([helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                          helper.make_node("Add", ["x", "b"], ["y"])], [X], [Y]))
save("undefined_input.onnx", model([helper.make_node("Add", ["x", "nope"], ["y"])], [X], [Y]))

ext = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3])
ext.data_location = TensorProto.EXTERNAL
ext.external_data.add(key="location", value="../../../etc/passwd")
save("external_escape.onnx", model([helper.make_node("Add", ["x", "w"], ["y"])], [X], [Y], [ext]))
ext_abs = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3])
ext_abs.data_location = TensorProto.EXTERNAL
ext_abs.external_data.add(key="location", value="/etc/passwd")
save("external_absolute.onnx", model([helper.make_node("Add", ["x", "w"], ["y"])], [X], [Y], [ext_abs]))

save("unknown_op.onnx", model([helper.make_node("FrobnicateTensor", ["x"], ["y"])], [X], [Y]))
save("bad_opset.onnx", model([helper.make_node("Relu", ["x"], ["y"])], [X], [Y], opset=99))
save("no_outputs.onnx", model([helper.make_node("Relu", ["x"], ["y"])], [X], []))
save("dup_output.onnx", model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["y"])], [X], [Y]))
# Shape mismatch only visible at compile: MatMul 2x3 by 2x3.
W = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
save("matmul_mismatch.onnx", model([helper.make_node("MatMul", ["x", "w"], ["y"])], [X], [Y], [W]))
# A good model for input-file errors.
save("good.onnx", model([helper.make_node("Relu", ["x"], ["y"])], [X], [Y]))
np.save(os.path.join(out, "wrong_dtype.npy"), np.zeros((2, 3), np.int32))
np.save(os.path.join(out, "wrong_shape.npy"), np.zeros((4, 3), np.float32))
open(os.path.join(out, "corrupt.npy"), "wb").write(b"not an npy file at all")
with open(os.path.join(out, "short.npy"), "wb") as f:
    f.write(open(os.path.join(out, "wrong_shape.npy"), "rb").read()[:-10])
