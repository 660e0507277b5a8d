"""What the live benchmarks share: running commands, waiting on a condition, the build they use,
and the loopback Slurm cluster they run on (scripts/slurm) -- one started for the run, or the
one SLURM_CONF and GANTRY_SLURM_DIR point at.
"""

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def arg_parser(doc):
    """A parser whose --help is the script's docstring: its first line, then the rest."""
    return argparse.ArgumentParser(description=doc.split("\n")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter,
                                   epilog=doc[doc.index("\n"):])


def say(prog, msg):
    print(f"{prog}: {msg}", file=sys.stderr, flush=True)


def run(args, check=True, **kw):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def wait_until(what, pred, timeout, poll=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(poll)
    raise RuntimeError(f"{what}: not reached within {timeout:.0f} s")


def binaries(prog):
    """(gantry, gantryd) of GANTRY_BUILD_DIR, else of build/release, built when absent."""
    build = os.environ.get("GANTRY_BUILD_DIR", "build/release")
    if "GANTRY_BUILD_DIR" not in os.environ:
        say(prog, "building gantry and gantryd (release preset)")
        run(["cmake", "--preset", "release"])
        run(["cmake", "--build", "--preset", "release", "--target", "gantry", "gantryd"])
    found = (os.path.join(build, "apps/gantry/gantry"), os.path.join(build, "apps/gantryd/gantryd"))
    for b in found:
        if not os.access(b, os.X_OK):
            sys.exit(f"{prog}: no {b}; build it first")
    return found


def start_slurm_unless_running(prog):
    """The directory of a cluster started here (to stop afterwards), or None when the
    environment already names a running one; either way its variables end up in os.environ."""
    if os.environ.get("SLURM_CONF") and os.environ.get("GANTRY_SLURM_DIR"):
        return None
    say(prog, "starting a Slurm cluster (scripts/slurm start)")
    env_file = run(["scripts/slurm", "start"]).strip()
    for line in open(env_file):
        m = re.match(r"export (\w+)=(.*)", line.strip())
        if m:
            os.environ[m.group(1)] = m.group(2)
    return os.path.dirname(env_file)


def start_gantryd(gantryd, spec, state, port_file, log_path, extra=()):
    """A gantryd on a free port, once it listens."""
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [gantryd, "--cluster", spec, "--state", state, "--listen", "127.0.0.1:0",
         "--port-file", port_file] + list(extra),
        stdout=log, stderr=subprocess.STDOUT)
    wait_until("gantryd listening", lambda: os.path.exists(port_file), 30)
    return proc


def set_scheduler_parameters(conf, params):
    """Rewrites slurm.conf's SchedulerParameters (none: Slurm's defaults), reconfigures, and
    returns what slurmctld reports."""
    with open(conf) as f:
        text = f.read()
    text = re.sub(r"^SchedulerParameters=.*\n", "", text, flags=re.M)
    if params:
        text += f"SchedulerParameters={params}\n"
    with open(conf, "w") as f:
        f.write(text)
    run(["scontrol", "reconfigure"])
    time.sleep(2)
    m = re.search(r"SchedulerParameters\s*=\s*(.*)", run(["scontrol", "show", "config"]))
    return m.group(1).strip() if m else ""


def clean_up(prog, started_slurm, work, keep):
    """Stops the cluster started for the run (if one was) and removes or keeps the work
    directory."""
    if started_slurm:
        run(["scripts/slurm", "stop", started_slurm], check=False)
    if keep:
        say(prog, f"work directory kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


def percentile(values, q):
    """Nearest-rank percentile; math.inf entries sort last."""
    if not values:
        return float("nan")
    v = sorted(values)
    return v[max(0, math.ceil(q / 100 * len(v)) - 1)]
