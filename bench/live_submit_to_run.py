#!/usr/bin/python3
"""Time from submission to running behind a deep queue: Gantry driving Slurm against Slurm's
own sched/backfill, on the same loopback Slurm cluster (scripts/slurm), same workload, one run.

The workload, for each side in turn:
  1. two blocker jobs take both h100 nodes (8 x h100 each) for an hour;
  2. BACKLOG jobs (default 1000) that each want a whole h100 node queue behind them;
  3. PROBES one-GPU a100 jobs (time limit 1 min) are submitted one at a time, PROBE_GAP seconds
     apart. Each fits at once on the idle a100 nodes without delaying any queued job, so the
     only thing between its submission and its start is the scheduler. A probe writes the time
     its batch script began; its latency is that minus the time just before its sbatch ran.
A Slurm side submits to the Slurm-scheduled partition `gpu`; a Gantry side to the
Gantry-managed partition `gantry`, with gantryd (default --interval and profile) running. The
sides run one after the other on the same cluster (--sides; default: Slurm with its defaults,
Slurm with bf_max_job_test=2000 so that its backfill looks past a 1000-job backlog at all, then
Gantry).

SchedulerParameters (rewritten in slurm.conf, then `scontrol reconfigure`; a side written
NAME+PARAMS uses PARAMS): Slurm's defaults on a Slurm side (bf_interval=30, batch_sched_delay=3, ...); on the Gantry side
batch_sched_delay=0, which docs/slurm.md asks of Gantry-managed clusters (a released job then
starts at once instead of at slurmctld's next batch pass, up to 3 s later). Both are flags.
A probe that has not started TIMEOUT seconds after submission counts as not started; the
percentiles then treat it as infinitely late (and the table says how many started).

  bench/live_submit_to_run.py                    # start a Slurm, measure both sides, stop it
  bench/live_submit_to_run.py --backlog 100 --probes 10   # a quick run
  bench/live_submit_to_run.py --json             # machine-readable result on stdout

Environment: SLURM_CONF and GANTRY_SLURM_DIR of a running scripts/slurm cluster to use it
instead of starting one (it must be idle); GANTRY_BUILD_DIR (default build/release, built with
the release preset when absent) holds apps/gantry/gantry and apps/gantryd/gantryd.
"""

import concurrent.futures
import json
import math
import os
import signal
import sys
import tempfile
import time

from live_common import (ROOT, arg_parser, binaries, clean_up, percentile, run,
                         set_scheduler_parameters, start_gantryd, start_slurm_unless_running,
                         wait_until)
from live_common import say as _say

ACCOUNT = "bench"
PROG = "live_submit_to_run"


def say(msg):
    _say(PROG, msg)


def squeue_states():
    """job id -> state of every job of ACCOUNT that Slurm still lists."""
    out = run(["squeue", "-h", "-A", ACCOUNT, "-o", "%i %T"], check=False)
    states = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1]
    return states


def sbatch(partition, gres, limit_min, wrap, out="/dev/null"):
    out_id = run(["sbatch", "--parsable", "-p", partition, "-A", ACCOUNT, "-N", "1",
                  f"--gres={gres}", "-t", str(limit_min), "-o", out, "--wrap", wrap])
    return out_id.strip().split(";")[0]


def cancel_all():
    run(["scancel", "-A", ACCOUNT], check=False)
    wait_until("all bench jobs gone",
               lambda: all(s in ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT")
                           for s in squeue_states().values()), 120, poll=0.5)


def run_side(name, partition, args, probe_dir):
    """Blockers, backlog, then probes; returns the probes' latencies in seconds."""
    say(f"[{name}] blockers on both h100 nodes")
    for _ in range(2):
        sbatch(partition, "gpu:h100:8", 120, "sleep 7200")
    wait_until(f"[{name}] blockers running",
               lambda: sum(s == "RUNNING" for s in squeue_states().values()) == 2, 120)

    say(f"[{name}] submitting {args.backlog} backlog jobs")
    t = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: sbatch(partition, "gpu:h100:8", 60, "sleep 60"),
                      range(args.backlog)))
    say(f"[{name}] backlog submitted in {time.monotonic() - t:.1f} s; settling {args.settle} s")
    time.sleep(args.settle)

    os.makedirs(probe_dir)
    submitted = []
    say(f"[{name}] {args.probes} probes, {args.probe_gap} s apart")
    for i in range(args.probes):
        path = os.path.join(probe_dir, f"probe-{i}")
        t_submit = time.time()
        sbatch(partition, "gpu:a100:1", 1, f"date +%s.%N > {path}.tmp && mv {path}.tmp {path}")
        submitted.append((path, t_submit))
        time.sleep(args.probe_gap)

    def started():
        return sum(os.path.exists(p) for p, _ in submitted)

    deadline = submitted[-1][1] + args.timeout
    while started() < len(submitted) and time.time() < deadline:
        time.sleep(0.5)
    latencies = []
    for path, t_submit in submitted:
        try:
            with open(path) as f:
                latencies.append(float(f.read().strip()) - t_submit)
        except FileNotFoundError:
            latencies.append(math.inf)
    say(f"[{name}] {started()}/{len(submitted)} probes started; cancelling")
    cancel_all()
    return latencies


def summarize(latencies):
    started = [x for x in latencies if math.isfinite(x)]
    return {
        "probes": len(latencies),
        "started": len(started),
        "p50_s": percentile(latencies, 50),
        "p90_s": percentile(latencies, 90),
        "max_s": max(latencies) if latencies else math.nan,
        "latencies_s": latencies,
    }


def finite(x):
    """JSON has no infinity: a probe that never started is null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [finite(v) for v in x]
    return x


def fmt(x):
    return "not started" if math.isinf(x) else f"{x:.2f}"


def main():
    ap = arg_parser(__doc__)
    ap.add_argument("--backlog", type=int, default=1000, help="queued jobs ahead of the probes")
    ap.add_argument("--probes", type=int, default=30, help="probe jobs per side")
    ap.add_argument("--probe-gap", type=float, default=2.0, help="seconds between probes")
    ap.add_argument("--settle", type=float, default=10.0,
                    help="seconds between the last backlog job and the first probe")
    ap.add_argument("--timeout", type=float, default=180.0,
                    help="seconds after the last probe's submission to wait for it to start")
    ap.add_argument("--slurm-params", default="",
                    help="SchedulerParameters on the Slurm side (default: Slurm's defaults)")
    ap.add_argument("--gantry-slurm-params", default="batch_sched_delay=0",
                    help="SchedulerParameters on the Gantry side (default: docs/slurm.md's "
                         "recommendation for Gantry-managed clusters)")
    ap.add_argument("--sides", default="slurm,slurm+bf_max_job_test=2000,gantry",
                    help="sides to run, in order: slurm or gantry, each optionally +"
                         "SchedulerParameters for that side")
    ap.add_argument("--gantry-profile", default="",
                    help="gantryd's --profile (default: gantryd's default)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--keep", action="store_true",
                    help="keep the work directory (gantryd.log, state.db, probe files)")
    args = ap.parse_args()
    os.chdir(ROOT)

    gantry, gantryd = binaries(PROG)
    started_slurm = start_slurm_unless_running(PROG)
    conf = os.environ["SLURM_CONF"]
    work = tempfile.mkdtemp(prefix="gantry-live-bench.")
    gantryd_proc = None
    result = {"backlog": args.backlog, "probes": args.probes, "probe_gap_s": args.probe_gap}
    try:
        # An account without limits, so that only the scheduler stands between probe and start.
        run(["sacctmgr", "-i", "add", "account", ACCOUNT], check=False)
        run(["sacctmgr", "-i", "add", "user", "root", f"account={ACCOUNT}"], check=False)
        sides = {}
        result["scheduler_parameters"] = {}
        for n, side in enumerate(args.sides.split(",")):
            kind, _, params = side.partition("+")
            if kind not in ("slurm", "gantry"):
                sys.exit(f"live_submit_to_run: unknown side {side!r} (slurm[+PARAMS], "
                         "gantry[+PARAMS])")
            if not params:
                params = args.slurm_params if kind == "slurm" else args.gantry_slurm_params
            result["scheduler_parameters"][side] = set_scheduler_parameters(conf, params)
            say(f"[{side}] SchedulerParameters: {result['scheduler_parameters'][side]}")
            side_dir = os.path.join(work, f"side{n}")
            if kind == "slurm":
                sides[side] = summarize(run_side(side, "gpu", args, side_dir))
                continue
            spec = os.path.join(side_dir + ".site.yaml")
            run([gantry, "cluster", "import", "--from-slurm", "-o", spec])
            gantryd_proc = start_gantryd(
                gantryd, spec, side_dir + ".state.db", side_dir + ".port",
                side_dir + ".gantryd.log",
                ["--profile", args.gantry_profile] if args.gantry_profile else [])
            sides[side] = summarize(run_side(side, "gantry", args, side_dir))
            gantryd_proc.send_signal(signal.SIGTERM)
            gantryd_proc.wait(timeout=30)
            gantryd_proc = None
        result["sides"] = sides
        g = [v["p50_s"] for k, v in sides.items() if k.startswith("gantry")]
        for k, v in sides.items():
            if k.startswith("slurm") and g and g[0] > 0:
                result.setdefault("p50_ratio_over_gantry", {})[k] = v["p50_s"] / g[0]
    finally:
        if gantryd_proc is not None:
            gantryd_proc.kill()
        run(["scancel", "-A", ACCOUNT], check=False)
        clean_up(PROG, started_slurm, work, args.keep)

    if args.json:
        print(json.dumps(finite(result), indent=2))
        return
    print(f"Submission to running of {args.probes} probe jobs behind {args.backlog} queued "
          f"jobs, {args.probe_gap} s apart\n")
    print("| side | SchedulerParameters | started | p50 s | p90 s | max s |")
    print("|---|---|---|---|---|---|")
    for name, s in result["sides"].items():
        params = result["scheduler_parameters"][name]
        print(f"| {name} | {params if params != '(null)' else 'defaults'} | "
              f"{s['started']}/{s['probes']} | {fmt(s['p50_s'])} | {fmt(s['p90_s'])} | "
              f"{fmt(s['max_s'])} |")
    for k, r in result.get("p50_ratio_over_gantry", {}).items():
        print(f"\np50 ratio {k} / gantry: {r:.1f}")


if __name__ == "__main__":
    main()
