#!/usr/bin/env python3
# The exec benchmark's Python module (eventbus-bench exec), with the helper: reads every
# bench.event, posts bench.ack for every 1,000, and on bench.report posts bench.result with the
# count and the 50th and 99th percentile of post → here (CLOCK_MONOTONIC, shared by every
# process), as FixtureLatencyProbe does for a Swift module.
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "../../../examples/modules"))
from eventbus_module import Gap, Module  # noqa: E402

module = Module()
latencies = []
clock = time.clock_gettime_ns
MONOTONIC = time.CLOCK_MONOTONIC
for item in module.events("bench.event", "bench.report"):
    if isinstance(item, Gap):
        continue
    if item.name == "bench.report":
        ordered = sorted(latencies)

        def percentile(p):
            return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else -1
        module.post("bench.result", {"count": len(ordered), "p50_ns": percentile(0.5), "p99_ns": percentile(0.99)})
        latencies = []
        continue
    latencies.append(clock(MONOTONIC) - item.mono)
    if len(latencies) % 1000 == 0:
        module.post("bench.ack", {"n": len(latencies)})
