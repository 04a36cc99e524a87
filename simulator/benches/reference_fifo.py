#!/usr/bin/env python3
"""Reference for the contended-replay benchmark: the plainest strict-FIFO GPU scheduler.

Usage: reference_fifo.py TRACE.csv GPUS

Reads a Philly-style CSV (timestamp, duration, num_gpus, ...), sorts jobs by submit time and
starts each in order as soon as GPUS minus the GPUs of running jobs covers it: one pool of GPUs,
no topology, no quotas, no backfill (the head of the queue blocks the rest). Jobs asking for more
than GPUS never start and are counted apart. Prints one line of `key=value` pairs: jobs,
unschedulable, mean and median queueing delay (s), makespan (s), and the wall time of the
simulation (s, after parsing). trainyard's contended replays are measured against this.
"""

import csv
import heapq
import sys
import time
from datetime import datetime


def read(path):
    jobs = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            submit = datetime.strptime(row["timestamp"], "%Y-%m-%d %H:%M:%S").timestamp()
            jobs.append((submit, float(row["duration"]), int(row["num_gpus"])))
    jobs.sort(key=lambda j: j[0])
    return jobs


def simulate(jobs, gpus):
    running = []  # (end, gpus) of started jobs, earliest end first
    free = gpus
    clock = 0.0
    waits = []
    unschedulable = 0
    makespan = 0.0
    for submit, duration, need in jobs:
        if need > gpus:
            unschedulable += 1
            continue
        # Strict FIFO: a job starts no earlier than the one before it.
        clock = max(clock, submit)
        while running and running[0][0] <= clock:
            free += heapq.heappop(running)[1]
        while free < need:
            end, held = heapq.heappop(running)
            clock = max(clock, end)
            free += held
        free -= need
        heapq.heappush(running, (clock + duration, need))
        waits.append(clock - submit)
        makespan = max(makespan, clock + duration)
    return waits, unschedulable, makespan


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    jobs = read(sys.argv[1])
    started = time.perf_counter()
    waits, unschedulable, makespan = simulate(jobs, int(sys.argv[2]))
    wall = time.perf_counter() - started
    waits.sort()
    mean = sum(waits) / len(waits) if waits else 0.0
    median = waits[len(waits) // 2] if waits else 0.0
    first = jobs[0][0] if jobs else 0.0
    print(
        f"jobs={len(waits)} unschedulable={unschedulable} mean_wait_s={mean:.1f} "
        f"median_wait_s={median:.1f} makespan_s={makespan - first:.0f} wall_s={wall:.3f}"
    )


if __name__ == "__main__":
    main()
