"""`python3 -m gantry`: convert checkpoints to and from plain torch.save files, so nobody is
locked in, and list them.

    python3 -m gantry export --root R [--job J] [--step N|latest] OUT.pt
    python3 -m gantry import --root R [--job J] --step N [--tag T] IN.pt
    python3 -m gantry ls --root R [--job J]

Export writes the state with whole (global) tensors, as gantry.checkpoint.load returns it. Import
refuses files that would run code (gantry.safe_load). S3 roots take
--endpoint/--region or the AWS variables and files. Progress goes to stderr on a terminal.
"""

import argparse
import os
import pickle
import sys
import time

EXIT_USAGE = 2


def _human(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


class _Progress:
    """A one-line progress report on stderr, only when stderr is a terminal."""

    def __init__(self, what):
        self.what = what
        self.enabled = sys.stderr.isatty()
        self._last = 0.0

    def __call__(self, done, total):
        now = time.monotonic()
        if not self.enabled or (now - self._last < 0.1 and done < total):
            return
        self._last = now
        pct = 100.0 * done / total if total else 100.0
        sys.stderr.write(f"\r{self.what}: {pct:5.1f}% ({_human(done)} of {_human(total)})")
        sys.stderr.flush()

    def done(self, message):
        if self.enabled:
            sys.stderr.write("\r\033[K")
        sys.stderr.write(f"{self.what}: {message}\n")


def _add_engine_args(p):
    p.add_argument("--root", required=True,
                   help="checkpoint root: a path, file:///dir or s3://bucket/prefix")
    p.add_argument("--job", default="default", help="the training run's name (default: default)")
    p.add_argument("--endpoint", default="", help="S3 endpoint URL (default: AWS's)")
    p.add_argument("--region", default="", help="S3 region")


def _checkpointer(args):
    from gantry import checkpoint  # pylint: disable=import-outside-toplevel
    return checkpoint.Checkpointer(args.root, job=args.job, rank=0, world_size=1,
                                   endpoint=args.endpoint, region=args.region)


def _step(text):
    if text == "latest":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a step number or 'latest': {text!r}") from None


def cmd_export(args):
    import torch  # pylint: disable=import-outside-toplevel
    progress = _Progress("export")
    start = time.monotonic()
    with _checkpointer(args) as c:
        step = c.manifest(args.step).step
        state = c.load(step, progress=progress)
    # Write then rename, so a failed export never leaves a truncated file under the final name.
    tmp = f"{args.output}.tmp-{os.getpid()}"
    try:
        torch.save(state, tmp)
        os.replace(tmp, args.output)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    size = os.path.getsize(args.output)
    progress.done(f"step {step} of job '{args.job}' -> {args.output} ({_human(size)}, "
                  f"{time.monotonic() - start:.1f} s)")
    return 0


def cmd_import(args):
    from gantry import safe_load  # pylint: disable=import-outside-toplevel
    progress = _Progress("import")
    start = time.monotonic()
    state = safe_load.load(args.input)
    with _checkpointer(args) as c:
        handle = c.save(state, args.step, tags=args.tag,
                        metadata={"imported_from": os.path.basename(args.input)})
        total = handle.stats["bytes_total"]
        if progress.enabled:
            # The engine reports no byte progress for a save in flight, only its end.
            sys.stderr.write(f"import: writing {_human(total)} as step {args.step}...")
            sys.stderr.flush()
        handle.wait()
    progress.done(f"{args.input} -> step {args.step} of job '{args.job}' "
                  f"({_human(total)}, {time.monotonic() - start:.1f} s)")
    return 0


def cmd_ls(args):
    with _checkpointer(args) as c:
        rows = c.list()
    print(f"{'step':>12}  {'committed':9}  {'ranks':>7}  {'bytes':>10}  tags")
    for r in rows:
        ranks = f"{r['parts']}/{r['world_size']}"
        print(f"{r['step']:>12}  {'yes' if r['committed'] else 'no':9}  {ranks:>7}  "
              f"{_human(r['bytes']):>10}  {','.join(r['tags'])}")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m gantry", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("export", help="write a checkpoint as a torch.save file")
    _add_engine_args(p)
    p.add_argument("--step", type=_step, default="latest", help="step number or latest")
    p.add_argument("output", help="the .pt file to write")
    p.set_defaults(fn=cmd_export)

    p = sub.add_parser("import", help="save a torch.save file as a checkpoint")
    _add_engine_args(p)
    p.add_argument("--step", type=int, required=True, help="the checkpoint's step")
    p.add_argument("--tag", action="append", default=[], help="tag the checkpoint (repeatable)")
    p.add_argument("input", help="the .pt file to read")
    p.set_defaults(fn=cmd_import)

    p = sub.add_parser("ls", help="list the checkpoints of a job")
    _add_engine_args(p)
    p.set_defaults(fn=cmd_ls)

    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except (OSError, ValueError, TypeError, KeyError, RuntimeError, pickle.UnpicklingError) as e:
        # The library's errors already name the object and the cause.
        print(f"gantry {args.command}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
