#!/usr/bin/env python3
"""Write a copy of an ONNX model whose pre-activation tensors are extra graph outputs.

Usage: add_preact_outputs.py IN.onnx OUT.onnx
Prints the added tensor names, one per line, on stdout (nothing, and no OUT file, if
none). Used by make_refs.mjs: a final Sigmoid/Softmax can saturate to exactly 0 or 1,
so the references also record the tensor that feeds it.

Rule: for each graph output, follow its producer back through Identity nodes and If
nodes (an If branch output that is, or is an Identity of, an outer-scope tensor); when
that reaches a top-level Sigmoid or Softmax node, its input becomes an extra output
with the same type as the graph output. Sigmoids inside If branches cannot be exposed
and are reported on stderr.
"""
import sys

import onnx

SQUASH = ("Sigmoid", "Softmax")


def main(src, dst):
    model = onnx.load(src)
    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    outputs = {o.name for o in g.output}
    added = []

    def trace(name, vi, seen):
        """Follow tensor `name` (typed like graph output `vi`) back to a squash node."""
        if name in seen or name not in producer:
            return
        seen.add(name)
        node = producer[name]
        if node.op_type in SQUASH:
            pre = node.input[0]
            if pre not in outputs and pre not in added:
                added.append(pre)
                extra = g.output.add()
                extra.CopyFrom(vi)
                extra.name = pre
        elif node.op_type == "Identity":
            trace(node.input[0], vi, seen)
        elif node.op_type == "If":
            k = list(node.output).index(name)
            for attr in node.attribute:
                if attr.type != onnx.AttributeProto.GRAPH:
                    continue
                sub = attr.g
                sub_prod = {o: n for n in sub.node for o in n.output}
                inner = sub.output[k].name
                n = sub_prod.get(inner)
                while n is not None and n.op_type == "Identity":
                    inner = n.input[0]
                    n = sub_prod.get(inner)
                if n is None:  # an outer-scope tensor: keep tracing outside
                    trace(inner, vi, seen)
                elif n.op_type in SQUASH:
                    print(f"add_preact_outputs: {src}: {n.op_type} inside If "
                          f"{attr.name} (-> {name}) not exposed", file=sys.stderr)

    for vi in list(g.output):
        trace(vi.name, vi, set())
    if added:
        onnx.save(model, dst)
    for name in added:
        print(name)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
