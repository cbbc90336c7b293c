"""Independent oracle: plain torch.compile, a counting backend and a counting trace handler.

Run as a script in a fresh process; prints {case: [graphs, breaks]} as JSON.
It shares no code with nbcompile.
"""

import json
import logging
import sys

import torch

sys.path.insert(0, sys.argv[1])
from oracle_cases import CASES  # noqa: E402


class BreakCounter(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record):
        artifact = getattr(record, "metadata", {}).get("artifact")
        if artifact and artifact.get("name") == "dynamo_graph_break_reason":
            self.count += 1


results = {}
for name, fn in CASES.items():
    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)  # noqa: B023 (called only in this iteration)
        return gm.forward

    counter = BreakCounter()
    trace = logging.getLogger("torch.__trace")
    trace.addHandler(counter)
    try:
        torch.compile(fn, backend=counting_backend)(torch.ones(4))
    finally:
        trace.removeHandler(counter)
    results[name] = [len(graphs), counter.count]
print(json.dumps(results))
