#!/usr/bin/env python3
"""Submit a job, print its events as they happen until it ends, then print its output.

    python submit_and_wait.py --queue team-a --name hello -- sh -c 'echo hello from $CUDA_VISIBLE_DEVICES'

Connects as the `baton` CLI does: BATON_SERVER, BATON_TLS_DIR and BATON_TOKEN_FILE (what
`baton dev` prints to export). Exits with the job's exit code (1 if it ended without one).
"""

import argparse
import sys
import time

from baton_client import BatonError, Client, JobState

FINAL_EVENTS = {"Succeeded", "Failed", "Cancelled"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queue", required=True)
    p.add_argument("--name", default="py-%d" % int(time.time()))
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("command", nargs="+", help="the program and its arguments (after --)")
    a = p.parse_args()

    try:
        with Client() as c:
            # Opened before the submit, so no event of the new job is missed.
            events = c.watch(a.name)
            job = c.submit(a.name, a.queue, a.command, gpus=a.gpus)
            print("submitted job %s (id %d)" % (job.name, job.id))
            for e in events:
                print("  %-10s %s" % (e.kind, e.message))
                if e.kind in FINAL_EVENTS:
                    break
            events.close()

            done = c.describe(job.id)
            print("job %s: %s" % (done.name, done.state))
            if done.attempt > 0:
                sys.stdout.write(c.logs(job.id))
            if done.state == JobState.SUCCEEDED:
                return 0
            return done.exit_code or 1
    except BatonError as e:
        print("error: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
