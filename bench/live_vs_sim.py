#!/usr/bin/python3
"""One engine, two drivers: the same workload run live (gantryd driving the loopback Slurm
cluster) and in the simulator from the live run's own `sacct` export; per-job waits compared.

The workload (seeded): JOBS short jobs of both teams of scripts/slurm's cluster (physics, quota
16 GPUs; biology, quota 8) in mixed shapes -- 1 to 8 GPUs on one node, and 2-node gangs of
8 x h100 or 4 x a100 -- each `sleep`ing 2 to 12 s, submitted with plain `sbatch` to the
Gantry-managed partition at exponential gaps (mean GAP s), enough to keep a queue. gantryd runs
with its defaults (profile `gantry`, 1 s cycles); slurm.conf gets batch_sched_delay=0, as
docs/slurm.md asks of Gantry-managed clusters.

When every job has ended, their accounting is exported as a site would (`sacct --parsable2`,
docs/formats/traces.md) and `gantry sim` runs it on the cluster spec `gantry cluster import
--from-slurm` wrote, with the same profile. Each job has the same submit time and run time on
both sides, so the difference between its live wait (sacct Start - Submit) and its simulated
wait is what the simulator got wrong about the schedule. Expected on this cluster: up to a
cycle (1 s) for gantryd to decide, up to a second for Slurm to start a released job, and
sacct's whole-second times -- a few seconds; the tolerance (--tolerance) is stated with the
share of jobs within it. Those seconds repeat along every chain of jobs that wait for each
other, so the simulator is also run with gantryd's rhythm (gantry sim --cycle C --launch-latency
L --end-latency E for C in --cycles, default the live run's --interval, L in --latencies, E in
--end-latencies: decisions only at ticks, a start L s after its decision, an end seen at the
first tick E s after it). What the live run's rhythm really was is read from gantryd's own
records: its state database holds each job's decision instant and the instant it saw the job
end, so sacct's Start minus the one is the launch latency and the other minus sacct's End the
end latency, per job; /metrics' gantry_cycle_seconds says how long its cycles took (on a loaded
machine longer than --interval). The measured model simulates those: the mean period between
cycles, the median launch latency of the jobs decided on arrival as L, and the median launch
plus end latency less L as E, in whole seconds (the medians of L and E alone are simulated too,
as measured_model_medians). (--overheads: the older model, N s added to every run and every
simulated wait; with a 1 s cycle and E = 0 it is the same as L = N.)

gantryd begins its cycles at a fixed phase of the second (--cycle-offset, 0.25 s), and the jobs
are submitted at the start of whole seconds (--unaligned: at the workload's fractional offsets,
as before 2026-12-03), so a second's events and the cycle stamped with it line up alike in
every run.

The floor any simulator can reach is how far two live runs of one workload differ:
--compare-live DIR DIR compares two kept runs of the same seed job by job (in submission order).

  bench/live_vs_sim.py                 # start a Slurm, run, compare, stop it
  bench/live_vs_sim.py --jobs 60       # a quick run
  bench/live_vs_sim.py --json --keep   # machine-readable; keep sacct.txt, the simulator's output
  bench/live_vs_sim.py --compare-live A B   # run-to-run noise of two kept live runs

Environment: SLURM_CONF and GANTRY_SLURM_DIR of a running, idle scripts/slurm cluster to use it
instead of starting one; GANTRY_BUILD_DIR (default build/release, built when absent) holds
apps/gantry/gantry and apps/gantryd/gantryd.
"""

import csv
import datetime
import json
import os
import random
import signal
import sqlite3
import sys
import tempfile
import time
import urllib.request

from live_common import (ROOT, arg_parser, binaries, clean_up, percentile, run,
                         set_scheduler_parameters, start_gantryd, start_slurm_unless_running,
                         wait_until)
from live_common import say as _say

PROG = "live_vs_sim"
PARTITION = "gantry"
SACCT_FORMAT = ("JobID,User,Account,Partition,QOS,Submit,Start,End,Elapsed,Timelimit,"
                "AllocTRES,ReqTRES,NNodes,State")
# (team, gres per node, nodes): what each team asks for, drawn uniformly.
SHAPES = {
    "physics": [("gpu:h100:1", 1), ("gpu:h100:2", 1), ("gpu:h100:4", 1), ("gpu:h100:8", 1),
                ("gpu:h100:8", 2)],
    "biology": [("gpu:a100:1", 1), ("gpu:a100:2", 1), ("gpu:a100:4", 1), ("gpu:a100:4", 2),
                ("gpu:h100:2", 1)],
}


def say(msg):
    _say(PROG, msg)


def workload(n, gap, seed):
    """[(offset s, team, gres, nodes, sleep s, time limit min)], offsets increasing."""
    rng = random.Random(seed)
    t = 0.0
    jobs = []
    for _ in range(n):
        team = rng.choice(sorted(SHAPES))
        gres, nodes = rng.choice(SHAPES[team])
        jobs.append((t, team, gres, nodes, rng.randint(2, 12), rng.choice([1, 2])))
        t += rng.expovariate(1.0 / gap)
    return jobs


def submit_all(jobs, aligned):
    """Submits each job at its offset (late if sbatch is slow: Slurm's Submit time is what both
    sides use); their Slurm ids. `aligned`: offsets are rounded to whole seconds and each job is
    submitted at the start of its wall-clock second, before gantryd's cycle of that second
    (--cycle-offset, 0.25 s in): so the cycle stamped with a job's Submit second is the one
    that first sees it, in every run, as the whole-second simulator assumes."""
    ids = []
    t0 = time.monotonic()
    wall0 = float(int(time.time()) + 1)
    for offset, team, gres, nodes, sleep_s, limit in jobs:
        if aligned:
            delay = wall0 + round(offset) - time.time()
        else:
            delay = t0 + offset - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        out = run(["sbatch", "--parsable", "-p", PARTITION, "-A", team, "-N", str(nodes),
                   f"--gres={gres}", "-t", str(limit), "-o", "/dev/null",
                   "--wrap", f"sleep {sleep_s}"])
        ids.append(out.strip().split(";")[0])
    return ids


def active(ids):
    """The jobs of `ids` Slurm still runs or queues. (The partition's whole queue is listed and
    filtered here: `squeue -j` with many ids fails outright once one has been purged.)"""
    wanted = set(ids)
    out = run(["squeue", "-h", "-p", PARTITION, "-o", "%i %T"])
    return [f[0] for f in (l.split() for l in out.splitlines())
            if len(f) == 2 and f[0] in wanted and f[1] in ("PENDING", "RUNNING", "COMPLETING",
                                                          "CONFIGURING", "REQUEUED")]


def export_sacct(ids):
    """sacct's records of the jobs once every one has ended (accounting lags the end a little).
    A job requeued after it started (preempted for fair share) has one record per run, and
    Slurm stamps its last with the requeue instant as Submit: the export gives each job its
    first submission, as the workload submitted it, so the simulator queues it from then."""
    text = ""

    def complete():
        nonlocal text
        text = run(["sacct", "--parsable2", "--noconvert", "-X", "-j", ",".join(ids),
                    "--format", SACCT_FORMAT])
        rows = list(csv.DictReader(text.splitlines(), delimiter="|"))
        return len(rows) == len(ids) and all(r["End"] not in ("", "Unknown") for r in rows)

    wait_until("sacct records of every job", complete, 120, poll=1.0)
    return first_submissions(text, run(["sacct", "--parsable2", "--noheader", "-D", "-X", "-j",
                                        ",".join(ids), "--format", "JobID,Submit"]))


def first_submissions(text, runs):
    """`text` (an export) with each job's Submit replaced by the earliest of its runs in `runs`
    (`sacct -D` lines JOBID|SUBMIT)."""
    first = {}
    for line in runs.splitlines():
        job, _, submit = line.partition("|")
        if submit and (job not in first or submit < first[job]):
            first[job] = submit
    lines = text.splitlines()
    header = lines[0].split("|")
    c_id, c_submit = header.index("JobID"), header.index("Submit")
    out = [lines[0]]
    for line in lines[1:]:
        f = line.split("|")
        f[c_submit] = min(f[c_submit], first.get(f[c_id], f[c_submit]))
        out.append("|".join(f))
    return "\n".join(out) + "\n"


def with_overhead(sacct_text, seconds):
    """The export with `seconds` added to every Elapsed: the simulator's model of what a live
    start costs beyond the run itself (the decision waits for gantryd's cycle, the release and
    Slurm's launch take a moment, and the end is seen a cycle later), for which the nodes stay
    taken. Live waits are then compared with simulated waits + `seconds`."""
    lines = sacct_text.splitlines()
    header = lines[0].split("|")
    col = header.index("Elapsed")
    out = [lines[0]]
    for line in lines[1:]:
        f = line.split("|")
        h, m, sec = (int(x) for x in f[col].split("-")[-1].split(":"))
        days = int(f[col].split("-")[0]) if "-" in f[col] else 0
        total = days * 86400 + h * 3600 + m * 60 + sec + seconds
        f[col] = f"{total // 3600:02d}:{total // 60 % 60:02d}:{total % 60:02d}"
        out.append("|".join(f))
    return "\n".join(out) + "\n"


def live_waits(sacct_text):
    """Job id -> (team, live wait s, state)."""
    parse = datetime.datetime.fromisoformat
    out = {}
    for r in csv.DictReader(sacct_text.splitlines(), delimiter="|"):
        wait = (parse(r["Start"]) - parse(r["Submit"])).total_seconds()
        out[r["JobID"]] = (r["Account"], wait, r["State"])
    return out


def gantryd_records(work):
    """Job id -> (decided, seen running, seen ended) instants from gantryd's state database
    (whole seconds of the cycle that did it; -1: never); {} without one."""
    path = os.path.join(work, "state.db")
    if not os.path.exists(path):
        return {}
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {r[0]: r[1:] for r in db.execute("SELECT id, decided, started, ended FROM jobs")}
    finally:
        db.close()


def measured_rhythm(work, sacct_text, interval=1.0):
    """What gantryd's rhythm was in the live run: per job, sacct's Start minus the decision
    instant (the launch latency), gantryd's seen end minus sacct's End (how late the end
    reached it), and their sum (what each link of a chain of jobs costs: an end seen, then a
    start); the launch latency of the jobs decided in the first cycle after their submission
    (on arrival: onto idle nodes, not nodes freed for them in the same cycle, after which Slurm
    was seen to start them a second later); the cycles' mean wall time and the mean period
    between cycle starts."""
    parse = datetime.datetime.fromisoformat
    recs = gantryd_records(work)
    latency, end_lag, chain, arrival = [], [], [], []
    for r in csv.DictReader(sacct_text.splitlines(), delimiter="|"):
        rec = recs.get(r["JobID"])
        if rec is None or rec[0] < 0:
            continue
        lat = parse(r["Start"]).timestamp() - rec[0]
        latency.append(lat)
        if rec[0] - parse(r["Submit"]).timestamp() <= interval:
            arrival.append(lat)
        if rec[2] >= 0:
            end_lag.append(rec[2] - parse(r["End"]).timestamp())
            chain.append(lat + end_lag[-1])
    out = {}
    for name, v in (("launch_latency_s", latency), ("end_seen_after_s", end_lag),
                    ("launch_on_arrival_s", arrival), ("launch_plus_end_s", chain)):
        out[name] = ({"jobs": len(v), "mean": sum(v) / len(v), "p10": percentile(v, 10),
                      "p50": percentile(v, 50), "p90": percentile(v, 90), "max": max(v)}
                     if v else None)
    try:
        with open(os.path.join(work, "run.json")) as f:
            info = json.load(f)
        count, total = info["cycles"], info["cycle_seconds_sum"]
        out["cycles"] = count
        out["cycle_wall_mean_s"] = total / count if count else None
        out["cycle_period_mean_s"] = info["gantryd_seconds"] / count if count else None
    except (OSError, KeyError):
        pass
    return out


def sim_waits(jobs_csv):
    out = {}
    with open(jobs_csv) as f:
        for r in csv.DictReader(f):
            out[r["id"]] = float(r["wait"]) if r["wait"] != "" else None
    return out


def kendall_tau(xs, ys):
    """Kendall's tau-a of two equally long sequences (ties count as neither)."""
    n = len(xs)
    s = 0
    for i in range(n):
        for j in range(i + 1, n):
            a = (xs[i] > xs[j]) - (xs[i] < xs[j])
            b = (ys[i] > ys[j]) - (ys[i] < ys[j])
            s += a * b
    return s / (n * (n - 1) / 2) if n > 1 else float("nan")


def compare(live, sim, tolerance):
    ids = sorted(live, key=int)
    missing = [i for i in ids if sim.get(i) is None]
    both = [i for i in ids if sim.get(i) is not None]
    diffs = [abs(live[i][1] - sim[i]) for i in both]
    teams = sorted({live[i][0] for i in both})
    # Start times (submit + wait) on each side: the order in which jobs started.
    return {
        "jobs": len(ids),
        "not_completed_live": [i for i in ids if live[i][2] != "COMPLETED"],
        "not_started_in_sim": missing,
        "abs_wait_diff_s": {"mean": sum(diffs) / len(diffs) if diffs else None,
                            "p50": percentile(diffs, 50), "p90": percentile(diffs, 90),
                            "max": max(diffs) if diffs else None},
        "tolerance_s": tolerance,
        "within_tolerance": sum(d <= tolerance for d in diffs) / len(diffs) if diffs else None,
        "mean_wait_s": {
            "live": sum(live[i][1] for i in both) / len(both) if both else None,
            "sim": sum(sim[i] for i in both) / len(both) if both else None,
        },
        "mean_wait_by_team_s": {
            t: {"live": sum(live[i][1] for i in both if live[i][0] == t) /
                max(1, sum(live[i][0] == t for i in both)),
                "sim": sum(sim[i] for i in both if live[i][0] == t) /
                max(1, sum(live[i][0] == t for i in both))}
            for t in teams},
        "waits_kendall_tau": kendall_tau([live[i][1] for i in both], [sim[i] for i in both]),
    }


def simulate_and_compare(gantry, args, work, sacct_text):
    """Simulates the export on work/site.yaml: event-driven, with gantryd's rhythm (its cycle,
    each of --latencies), and with each of --overheads."""
    live = live_waits(sacct_text)
    result = {"seed": args.seed, "gap_s": args.gap, "profile": args.profile,
              "interval_s": args.interval,
              "measured": measured_rhythm(work, sacct_text, args.interval),
              "models": {}}
    # (name, trace text, extra gantry sim flags, seconds added to each simulated wait)
    models = [("event-driven", sacct_text, [], 0)]
    cycles = args.cycles or [round(args.interval)]
    rhythms = [(c, lat, end) for c in cycles for lat in args.latencies
               for end in args.end_latencies]
    measured = result["measured"]
    if measured.get("launch_latency_s") and measured.get("end_seen_after_s"):
        # The live run's own: the mean period between its cycles (a loaded gantryd's cycle
        # takes longer than --interval), and in whole seconds the median launch latency of
        # the jobs started on arrival, the rest of the median launch-plus-end as the end
        # latency. (The median of each alone misleads when a run splits into jobs that start
        # at once and end late in their second and jobs that start a second after the nodes
        # freed for them and end early in theirs: both add one second per link of a chain.)
        period = max(1, round(measured.get("cycle_period_mean_s") or args.interval))
        lat = measured["launch_on_arrival_s"] or measured["launch_latency_s"]
        lat = max(0, round(lat["p50"]))
        end = max(0, round(measured["launch_plus_end_s"]["p50"]) - lat)
        m = (period, lat, end)
        medians = (period, max(0, round(measured["launch_latency_s"]["p50"])),
                   max(0, round(measured["end_seen_after_s"]["p50"])))
        rhythms += [m, medians]
        result["measured_model"] = "cycle_{}s_launch_{}s_end_{}s".format(*m)
        result["measured_model_medians"] = "cycle_{}s_launch_{}s_end_{}s".format(*medians)
    for c, lat, end in dict.fromkeys(rhythms):
        models.append((f"cycle_{c}s_launch_{lat}s_end_{end}s", sacct_text,
                       ["--cycle", f"{c}s", "--launch-latency", f"{lat}s",
                        "--end-latency", f"{end}s"], 0))
    models += [(f"overhead_{o}s", with_overhead(sacct_text, o), [], o)
               for o in args.overheads if o > 0]
    for name, text, flags, shift in models:
        trace = os.path.join(work, f"sacct-{name}.txt")
        with open(trace, "w") as f:
            f.write(text)
        sim_out = os.path.join(work, f"sim-{name}")
        # The live run itself is the `as-recorded` replay of the export: the report
        # (sim_out/report.html) shows it beside the simulated profile, and the summary's
        # replay_error measures the same differences (without an overhead's shift).
        # The jobs are `sleep`s: a preempted one starts over at once, with no checkpoint to
        # resume from and none to load (the simulator's default model is hourly checkpoints
        # and a 5-minute restart, which ran every preempted sleep into its time limit).
        run([gantry, "sim", "--cluster", os.path.join(work, "site.yaml"), "--trace", trace,
             "--format", "sacct", "--profile", f"as-recorded,{args.profile}",
             "--out", sim_out, "--json", "--checkpoint-model", "none"] + flags)
        sim = sim_waits(os.path.join(sim_out, args.profile, "jobs.csv"))
        # Under the overhead model a job that did not queue at all waits `shift` live.
        model = compare(live, {i: w + shift if w is not None else None for i, w in sim.items()},
                        args.tolerance)
        with open(os.path.join(sim_out, args.profile, "summary.json")) as f:
            model["replay_error"] = json.load(f)["replay_error"]
        model["report"] = os.path.join(sim_out, "report.html")
        result["models"][name] = model
    return result


def compare_live(dirs, tolerance):
    """Two kept live runs of one workload, job by job in submission order: the run-to-run noise
    (sacct's Submit differs a little between the runs, so waits are compared)."""
    runs = []
    for d in dirs:
        with open(os.path.join(d, "sacct.txt")) as f:
            live = live_waits(f.read())
        runs.append([live[i] for i in sorted(live, key=int)])
    if len(runs[0]) != len(runs[1]):
        sys.exit(f"{PROG}: the runs have {len(runs[0])} and {len(runs[1])} jobs")
    a = {str(i): j for i, j in enumerate(runs[0])}
    b = {str(i): j[1] for i, j in enumerate(runs[1])}
    return compare(a, b, tolerance)


def save_run_info(work, args, gantryd_seconds):
    """work/run.json: the live run's settings and gantryd's cycles so far (/metrics)."""
    with open(os.path.join(work, "port")) as f:
        port = f.read().strip()
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    info = {"seed": args.seed, "jobs": args.jobs, "gap_s": args.gap, "interval_s": args.interval,
            "profile": args.profile, "gantryd_seconds": gantryd_seconds,
            "load_average": os.getloadavg(), "aligned_submissions": not args.unaligned,
            "cycle_offset_s": args.cycle_offset}
    for line in metrics.decode().splitlines():
        if line.startswith("gantry_cycle_seconds_count"):
            info["cycles"] = int(float(line.split()[-1]))
        elif line.startswith("gantry_cycle_seconds_sum"):
            info["cycle_seconds_sum"] = float(line.split()[-1])
    with open(os.path.join(work, "run.json"), "w") as f:
        json.dump(info, f, indent=2)


def live_run(gantry, gantryd, args):
    """Runs the workload under gantryd on the Slurm cluster, then compares."""
    started_slurm = start_slurm_unless_running(PROG)
    work = tempfile.mkdtemp(prefix="gantry-live-vs-sim.")
    gantryd_proc = None
    ids = []
    try:
        set_scheduler_parameters(os.environ["SLURM_CONF"], "batch_sched_delay=0")
        spec = os.path.join(work, "site.yaml")
        run([gantry, "cluster", "import", "--from-slurm", "-o", spec])
        gantryd_proc = start_gantryd(
            gantryd, spec, os.path.join(work, "state.db"), os.path.join(work, "port"),
            os.path.join(work, "gantryd.log"),
            ["--profile", args.profile, "--interval", str(args.interval)] +
            ([] if args.cycle_offset is None else ["--cycle-offset", str(args.cycle_offset)]))
        gantryd_started = time.monotonic()
        jobs = workload(args.jobs, args.gap, args.seed)
        say(f"submitting {len(jobs)} jobs over ~{jobs[-1][0]:.0f} s")
        t = time.monotonic()
        ids = submit_all(jobs, not args.unaligned)
        say(f"submitted in {time.monotonic() - t:.0f} s; waiting for them to end")
        wait_until("every job ended", lambda: not active(ids), 1800, poll=1.0)
        say(f"all ended {time.monotonic() - t:.0f} s after the first submission")
        save_run_info(work, args, time.monotonic() - gantryd_started)
        gantryd_proc.send_signal(signal.SIGTERM)
        gantryd_proc.wait(timeout=30)
        gantryd_proc = None
        sacct_text = export_sacct(ids)
        with open(os.path.join(work, "sacct.txt"), "w") as f:
            f.write(sacct_text)
        return simulate_and_compare(gantry, args, work, sacct_text)
    finally:
        if gantryd_proc is not None:
            gantryd_proc.kill()
        if ids:
            run(["scancel"] + ids, check=False)
        clean_up(PROG, started_slurm, work, args.keep)


def main():
    ap = arg_parser(__doc__)
    ap.add_argument("--jobs", type=int, default=200, help="jobs in the workload")
    ap.add_argument("--gap", type=float, default=1.0, help="mean seconds between submissions")
    ap.add_argument("--seed", type=int, default=1, help="seed of the workload")
    ap.add_argument("--profile", default="gantry", help="profile of gantryd and the simulator")
    ap.add_argument("--interval", type=float, default=1.0, help="gantryd's --interval")
    ap.add_argument("--cycle-offset", type=float, default=None,
                    help="gantryd's --cycle-offset (default: gantryd's own, 0.25 s)")
    ap.add_argument("--unaligned", action="store_true",
                    help="submit at the workload's fractional offsets, at any phase of the "
                         "second (as before 2026-12-03), not at the start of whole seconds")
    ap.add_argument("--latencies", default="0,1,2",
                    help="comma-separated launch latencies (whole s) simulated with gantryd's "
                         "cycle (--interval), one simulation each")
    ap.add_argument("--cycles", default="",
                    help="comma-separated cycles (whole s) to simulate; default: --interval")
    ap.add_argument("--end-latencies", default="0,1",
                    help="comma-separated end latencies (whole s: an end reaches gantryd that much "
                         "later), crossed with --latencies; the live run's measured medians are "
                         "simulated too")
    ap.add_argument("--overheads", default="",
                    help="the older model, one simulation each: comma-separated seconds added to "
                         "every run and every simulated wait")
    ap.add_argument("--tolerance", type=float, default=3.0,
                    help="seconds of wait difference counted as agreement")
    ap.add_argument("--reanalyse", metavar="DIR",
                    help="no live run: compare again from a kept work directory's sacct.txt and "
                         "site.yaml (e.g. with other --overheads)")
    ap.add_argument("--compare-live", nargs=2, metavar="DIR",
                    help="no live run: compare two kept live runs of the same workload")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--keep", action="store_true",
                    help="keep the work directory (sacct.txt, site.yaml, gantryd.log, sim/)")
    args = ap.parse_args()
    try:
        args.latencies = sorted({int(x) for x in args.latencies.split(",") if x})
        args.end_latencies = sorted({int(x) for x in args.end_latencies.split(",") if x})
        args.cycles = sorted({int(x) for x in args.cycles.split(",") if x})
        args.overheads = sorted({int(x) for x in args.overheads.split(",") if x})
    except ValueError:
        sys.exit(f"{PROG}: --latencies and --overheads take whole seconds, e.g. 0,1,2")
    if (args.jobs < 1 or args.gap <= 0 or min(args.latencies + args.end_latencies + args.overheads + [0]) < 0 or
            min(args.cycles + [1]) < 1 or
            args.interval < 1 or args.interval != round(args.interval)):
        sys.exit(f"{PROG}: --jobs must be at least 1, --gap positive, --latencies and "
                 "--overheads not negative, --cycles and --interval whole seconds, at least 1")
    if args.compare_live:
        m = compare_live(args.compare_live, args.tolerance)
        if args.json:
            print(json.dumps(m, indent=2))
            return
        d = m["abs_wait_diff_s"]
        print(f"{m['jobs']} jobs, two live runs: mean wait {m['mean_wait_s']['live']:.2f} s and "
              f"{m['mean_wait_s']['sim']:.2f} s; per-job |wait difference| mean {d['mean']:.2f}, "
              f"p50 {d['p50']:.2f}, p90 {d['p90']:.2f}, max {d['max']:.2f} s; "
              f"{100 * m['within_tolerance']:.1f}% within {args.tolerance:g} s; Kendall tau "
              f"{m['waits_kendall_tau']:.3f}")
        return
    os.chdir(ROOT)
    gantry, gantryd = binaries(PROG)
    if args.reanalyse:
        info = os.path.join(args.reanalyse, "run.json")
        if os.path.exists(info):  # the live run's settings, not the flags' defaults
            with open(info) as f:
                saved = json.load(f)
            args.seed, args.gap, args.interval = saved["seed"], saved["gap_s"], saved["interval_s"]
        with open(os.path.join(args.reanalyse, "sacct.txt")) as f:
            result = simulate_and_compare(gantry, args, args.reanalyse, f.read())
    else:
        result = live_run(gantry, gantryd, args)

    if args.json:
        print(json.dumps(result, indent=2))
        return
    first = next(iter(result["models"].values()))
    print(f"{first['jobs']} jobs (seed {args.seed}, mean gap {args.gap} s), profile "
          f"{args.profile}: live on Slurm vs simulated from the live sacct export\n")
    names = list(result["models"])
    print("| | live | " + " | ".join(f"simulated, {n.replace('_', ' ')}" for n in names) + " |")
    print("|---|---:|" + "---:|" * len(names))
    models = [result["models"][n] for n in names]
    print(f"| mean wait s | {first['mean_wait_s']['live']:.2f} | " +
          " | ".join(f"{m['mean_wait_s']['sim']:.2f}" for m in models) + " |")
    for team in first["mean_wait_by_team_s"]:
        print(f"| mean wait s, {team} | {first['mean_wait_by_team_s'][team]['live']:.2f} | " +
              " | ".join(f"{m['mean_wait_by_team_s'][team]['sim']:.2f}" for m in models) + " |")
    for label, key in (("mean", "mean"), ("p50", "p50"), ("p90", "p90"), ("max", "max")):
        print(f"| per-job abs wait difference, {label} s | | " +
              " | ".join(f"{m['abs_wait_diff_s'][key]:.2f}" for m in models) + " |")
    print(f"| jobs within {args.tolerance:g} s | | " +
          " | ".join(f"{100 * m['within_tolerance']:.1f}%" for m in models) + " |")
    print("| Kendall tau of the waits | | " +
          " | ".join(f"{m['waits_kendall_tau']:.3f}" for m in models) + " |")
    ms = result["measured"]
    for key, label in (("launch_latency_s", "sacct Start - gantryd's decision"),
                       ("launch_on_arrival_s", "the same, jobs decided on arrival"),
                       ("end_seen_after_s", "gantryd saw the end after sacct's End"),
                       ("launch_plus_end_s", "launch plus end latency")):
        if ms.get(key):
            v = ms[key]
            print(f"measured: {label}: mean {v['mean']:.2f} s, p10 {v['p10']:.0f}, p50 "
                  f"{v['p50']:.0f}, p90 {v['p90']:.0f}, max {v['max']:.0f} ({v['jobs']} jobs)")
    if ms.get("cycles"):
        print(f"measured: {ms['cycles']} cycles, {ms['cycle_wall_mean_s']:.3f} s of work each, "
              f"one every {ms['cycle_period_mean_s']:.3f} s")
    for n, m in result["models"].items():
        if m["not_completed_live"] or m["not_started_in_sim"]:
            print(f"{n}: not completed live: {m['not_completed_live']}; never started in the "
                  f"simulator: {m['not_started_in_sim']}")

if __name__ == "__main__":
    main()
