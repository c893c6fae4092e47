# Writes OUT/model.onnx: one Identity per KServe datatype (BOOL, UINT8..UINT64, INT8..INT64, FP16,
# FP32, FP64), each input of shape [N] (symbolic: the server compiles per request shape).
import sys
import onnx
from onnx import TensorProto, helper

types = [("b", TensorProto.BOOL), ("u8", TensorProto.UINT8), ("u16", TensorProto.UINT16),
         ("u32", TensorProto.UINT32), ("u64", TensorProto.UINT64), ("i8", TensorProto.INT8),
         ("i16", TensorProto.INT16), ("i32", TensorProto.INT32), ("i64", TensorProto.INT64),
         ("f16", TensorProto.FLOAT16), ("f32", TensorProto.FLOAT), ("f64", TensorProto.DOUBLE)]
nodes, ins, outs = [], [], []
for n, t in types:
    ins.append(helper.make_tensor_value_info("in_" + n, t, ["N"]))
    outs.append(helper.make_tensor_value_info("out_" + n, t, ["N"]))
    nodes.append(helper.make_node("Identity", ["in_" + n], ["out_" + n], name="id_" + n))
g = helper.make_graph(nodes, "types", ins, outs)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
onnx.checker.check_model(m)
onnx.save(m, sys.argv[1] + "/model.onnx")
