#!/usr/bin/python3
# ONNX Runtime's own per-node times, to set beside `JIFFY_PROFILE=N build/jiffy bench ... --profile`:
#   JIFFY_ORT_PROFILE=/tmp/ortp build/jiffy_vs_ort --model NAME --rounds 1 --seconds 2
#   /usr/bin/python3 scripts/ort_profile.py /tmp/ortp_<date>.json [ROWS]
# (jiffy_vs_ort enables ORT's profiler on its session; the file is written when the session is
# released.) Prints the median over runs of each node's kernel time (µs), in execution order with
# its op and output shape, then the sum. ORT's timers add a little to each node: compare layers,
# not totals, and time with jiffy_vs_ort without the profiler.
import collections
import json
import statistics
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: ort_profile.py PROFILE.json [ROWS]")
    rows_wanted = int(sys.argv[2]) if len(sys.argv) > 2 else 10**9
    events = json.load(open(sys.argv[1]))
    by_node = collections.OrderedDict()
    for e in events:
        name = e.get("name", "")
        if e.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        node = name[: -len("_kernel_time")]
        args = e.get("args", {})
        entry = by_node.setdefault(node, {"dur": [], "op": args.get("op_name", "?"),
                                          "shape": args.get("output_type_shape", [])})
        entry["dur"].append(float(e.get("dur", 0)))
    if not by_node:
        sys.exit("no node events in " + sys.argv[1])
    total = 0.0
    print("%-4s %-32s %-20s %-28s %9s %5s" % ("#", "node", "op", "output", "us", "runs"))
    for i, (node, v) in enumerate(by_node.items()):
        med = statistics.median(v["dur"])
        total += med
        if i < rows_wanted:
            shape = ",".join("x".join(str(d) for d in list(s.values())[0]) for s in v["shape"] if s)
            print("%-4d %-32s %-20s %-28s %9.1f %5d" % (i, node[-32:], v["op"], shape[:28], med, len(v["dur"])))
    print("sum of per-node medians: %.1f us over %d nodes" % (total, len(by_node)))


if __name__ == "__main__":
    main()
