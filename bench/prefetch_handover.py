#!/usr/bin/python3
"""What gantry.data.Prefetcher's next() costs when the item is already there: a loop that
sleeps 0.8 ms per step (a training step that releases the GIL, as a CUDA synchronisation does)
and times each next(), against a producer that is idle (items made at once) or live (about
0.2 ms of Python per item, as unpickling a batch is). No item is ever waited for
(wait_seconds, printed, stays ~0): the time is the hand-over itself.

  PYTHONPATH=python:build/default/python /usr/bin/python3 bench/prefetch_handover.py [ITEMS [DEPTH]]

DEPTH (default 4) is the Prefetcher's; from depth 8 the loop gives room back in groups of
depth // 4 (gantry.data._Queue), so compare versions at depth 16 to see that.

Run it with the PYTHONPATH of another checkout's python/ to compare two versions
(docs/performance.md, "the Prefetcher's hand-over on C-level queues")."""

import sys
import time

from gantry.data import Prefetcher


def work():
    x = 0
    for i in range(3000):
        x += i
    return x


def source(n, live):
    for i in range(n):
        if live:
            work()
        yield i


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    depth = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    for live in (False, True):
        p = Prefetcher(source(n, live), depth=depth)
        time.sleep(0.05)
        total = 0.0
        for _ in range(n):
            time.sleep(0.0008)
            t = time.perf_counter()
            next(p)
            total += time.perf_counter() - t
        print(f"{'live' if live else 'idle'} producer, depth {depth}: "
              f"{total / n * 1e6:.1f} us per next() "
              f"(waited {p.wait_seconds:.3f} s of it)")


if __name__ == "__main__":
    main()
