"""Run exported code in a fresh interpreter and count graphs and breaks, independently of nbcompile.

Reads {"code": ..., "run": ...} as JSON on stdin; prints {"graphs": N, "breaks": M, "result": [...]}.
Counts come from torch's structured trace alone: one ``dynamo_output_graph`` record per graph and
one ``dynamo_graph_break_reason`` artifact per break.
"""

import json
import logging
import sys

import torch  # noqa: F401  # torch sets up its loggers at import: before the handler below is attached


class Counter(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.graphs = 0
        self.breaks = 0

    def emit(self, record):
        metadata = getattr(record, "metadata", {}) or {}
        if "dynamo_output_graph" in metadata:
            self.graphs += 1
        artifact = metadata.get("artifact")
        if artifact and artifact.get("name") == "dynamo_graph_break_reason":
            self.breaks += 1


job = json.load(sys.stdin)
counter = Counter()
trace = logging.getLogger("torch.__trace")
trace.setLevel(logging.DEBUG)
trace.addHandler(counter)
namespace = {"__name__": "__main__"}
exec(compile(job["code"], "<exported>", "exec"), namespace)
value = eval(job["run"], namespace)
trace.removeHandler(counter)
print(json.dumps({"graphs": counter.graphs, "breaks": counter.breaks, "result": value.tolist()}))
