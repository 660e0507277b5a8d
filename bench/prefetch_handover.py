#!/usr/bin/python3
"""What gantry.data.Prefetcher's next() costs when the item is already there: a loop that
sleeps 0.8 ms per step (a training step that releases the GIL, as a CUDA synchronisation does)
and times each next(), against a producer that is idle (items made at once) or live (about
0.2 ms of Python per item, as unpickling a batch is). No item is ever waited for
(wait_seconds, printed, stays ~0): the time is the hand-over itself.

Then a producer that is behind, as DataLoader workers are at a training loop's start: items
come in bursts of 4 every 4 ms (a wait without the GIL, as for the workers' pipe, then about
0.3 ms of Python per item, as unpickling is), and the loop's step is 0.5 ms, so the loop waits
in next() for the first item of every burst. Printed, over the items the loop was already
waiting for: how long after the item was made next() returned it, median and 90th percentile.
A loop woken by an item needs the GIL back from a producer already busy with the next one;
before the Prefetcher handed it over, the loop had it only when the producer next waited (the
end of its burst) or at the interpreter's switch interval (5 ms).

  PYTHONPATH=python:build/default/python /usr/bin/python3 bench/prefetch_handover.py [ITEMS [DEPTH]]

DEPTH (default 4) is the Prefetcher's; the thread refills depth // 4 items at a time (from
depth 8 more than one; gantry.data._Queue), so compare versions at depth 16 to see that.

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


def bursts(n, rounds):
    for i in range(n):
        if i % 4 == 0:
            time.sleep(0.004)
        for _ in range(rounds):
            work()
        yield time.perf_counter()  # when the item was made


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
    # A producer behind the loop: rounds of work() making about 0.3 ms per item.
    t = time.perf_counter()
    work()
    rounds = max(1, round(0.0003 / (time.perf_counter() - t)))
    p = Prefetcher(bursts(n // 2, rounds), depth=depth)
    late = []
    for _ in range(n // 2):
        time.sleep(0.0005)
        asked = time.perf_counter()
        made = next(p)
        if made > asked:  # the loop waited for it
            late.append(time.perf_counter() - made)
    late.sort()
    median, p90 = late[len(late) // 2], late[int(0.9 * len(late))]
    print(f"producer behind the loop, depth {depth}: next() returned an item it waited for "
          f"{median * 1e6:.0f} us (median), {p90 * 1e6:.0f} us (90th percentile) after it was "
          f"made ({len(late)} items)")


if __name__ == "__main__":
    main()
