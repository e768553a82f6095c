#!/usr/bin/env python3
"""A preemptible training loop in miniature, for baton.

baton sends the checkpoint signal (SIGTERM unless the job says otherwise; the name is in
BATON_CHECKPOINT_SIGNAL) when it needs the GPUs back. This job then saves its progress to
BATON_CHECKPOINT_DIR and exits; when baton starts it again it sets BATON_RESUME=1 and the
job continues from its checkpoint. Exiting 0 after a checkpoint is fine: baton sent the
signal, so it records the job as stopped, not finished.

    python3 train.py --steps 100 --step-ms 100
"""
import argparse
import os
import signal
import sys
import time

stop_requested = False


def request_stop(signum, frame):
    # Only set a flag: the loop saves at a step boundary, where the state is consistent.
    global stop_requested
    stop_requested = True


def checkpoint_path():
    # The rank's own directory: only files there count as this rank's checkpoint (the ranks
    # of a gang share BATON_CHECKPOINT_DIR). An agent that does not set it: the job's one.
    rank = os.environ.get("BATON_RANK", "0")
    job_dir = os.environ["BATON_CHECKPOINT_DIR"]
    rank_dir = os.environ.get("BATON_RANK_CHECKPOINT_DIR", os.path.join(job_dir, f"rank-{rank}"))
    os.makedirs(rank_dir, exist_ok=True)
    return os.path.join(rank_dir, f"rank-{rank}.ckpt")


def save(step):
    path = checkpoint_path()
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{step}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # atomic: a reader never sees half a checkpoint


def load():
    with open(checkpoint_path()) as f:
        return int(f.read().strip())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--step-ms", type=int, default=100)
    args = parser.parse_args()

    sig = os.environ.get("BATON_CHECKPOINT_SIGNAL", "SIGTERM").upper()
    sig = sig if sig.startswith("SIG") else "SIG" + sig
    for s in {signal.SIGTERM, getattr(signal, sig, signal.SIGTERM)}:
        signal.signal(s, request_stop)

    step = 0
    if os.environ.get("BATON_RESUME"):
        try:
            step = load()
            print(f"resumed from step {step}", flush=True)
        except (OSError, ValueError) as e:
            print(f"cannot resume ({e}); starting from step 0", file=sys.stderr, flush=True)

    while step < args.steps:
        if stop_requested:
            save(step)
            print(f"checkpointed at step {step}", flush=True)
            return 0
        time.sleep(args.step_ms / 1000)  # one step of "training"
        step += 1
        print(f"step {step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
