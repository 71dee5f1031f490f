#!/usr/bin/env python3
"""Where a cuda push's time goes, from a worker's log (docs/gpu.md, "The real-model run").

Reads the worker's "transfer completed" lines (their timing marks: conn, adm, w1, stg, lnch, ack; µs since the epoch)
and prints, per order size, the median µs of each step of the push:
  admission   conn -> adm    the receiver's gate admitted the push
  run table   adm  -> w1     the plan became absolute device addresses
  staging     w1   -> stg    the table chunked, written to pinned memory, its upload enqueued
  launch      stg  -> lnch   the kernel launched and the completion event recorded
  gpu wait    lnch -> ack    the copy ran and the host saw its event complete
Usage: gpu/push-steps.py worker.log [more logs]
"""
import re
import statistics
import sys

LINE = re.compile(r'transfer completed .*?bytes="(\d+)".*?transport="cuda".*?marks="([^"]*)"')
STEPS = [("admission", "conn", "adm"), ("run table", "adm", "w1"), ("staging", "w1", "stg"), ("launch", "stg", "lnch"),
         ("gpu wait", "lnch", "ack"), ("push", "conn", "ack")]


def main(paths):
    by_size = {}
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = LINE.search(line)
                if not m:
                    continue
                marks = dict(kv.split("=", 1) for kv in m.group(2).split(",") if "=" in kv)
                try:
                    t = {k: int(v) for k, v in marks.items()}
                except ValueError:
                    continue
                by_size.setdefault(int(m.group(1)), []).append(t)
    if not by_size:
        print("no cuda pushes with marks in", ", ".join(paths))
        return 1
    print("| order MiB | pushes | " + " | ".join(s[0] + " µs" for s in STEPS) + " |")
    print("| ---: | ---: |" + " ---: |" * len(STEPS))
    for size in sorted(by_size):
        rows = by_size[size]
        cells = []
        for _, a, b in STEPS:
            v = [r[b] - r[a] for r in rows if a in r and b in r]
            cells.append("%.0f" % statistics.median(v) if v else "–")
        print("| %.1f | %d | %s |" % (size / 2**20, len(rows), " | ".join(cells)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) if len(sys.argv) > 1 else (print(__doc__) or 2))
