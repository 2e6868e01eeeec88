"""Worker for the launcher tests of tests/test_launch.py (no TensorFlow, starts in milliseconds).

    python tests/_dist_signal_worker.py OUT_DIR MODE
MODE "die":  rank 1 kills itself with SIGKILL after 1 s; rank 0 sleeps (the launcher must stop it).
MODE "peer": rank 1 exits at once with PeerStopped's status 3 (it stopped because another worker did); rank 0,
  the cause, prints an ERROR line and exits 2 after 2 s.
MODE "same_error": as main.py's workers on bad input that each finds: rank 1 prints a WARNING line of its own, a
  WARNING and an ERROR line rank 0 prints 1 s later too, and exits 2 at once; rank 0 then exits 2.
MODE "wait": every rank writes ready-<rank> and waits for SIGTERM (or SIGHUP), then writes got-<rank>-<SIGNAME> and exits 0.
MODE "ctrl_c": as main.py's training on SIGINT: rank 1 exits 130 at once, rank 0 first takes 2 s to write
  stopped-0 (its checkpoint); a SIGTERM meanwhile is recorded as terminated-<rank>.
MODE "stuck": rank 0 as in "ctrl_c"; rank 1 as a worker blocked in a collective its peer left (a Ctrl-C during
  start-up): it writes ready-1 and then takes no signal but SIGKILL.
"""
import json
import os
import signal
import sys
import time

out_dir, mode = sys.argv[1], sys.argv[2]
rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
os.makedirs(out_dir, exist_ok=True)
print("worker {} started, local rank {}".format(rank, os.environ.get("RN50_LOCAL_RANK")), flush=True)
if mode == "die":
    if rank == 1:
        time.sleep(1)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(120)
    open(os.path.join(out_dir, "survived-{}".format(rank)), "w").close()
elif mode == "peer":
    if rank == 1:
        print("ERROR: worker 1 stopped: another worker could not start this run", file=sys.stderr, flush=True)
        sys.exit(3)
    time.sleep(2)
    print("ERROR: the cause", file=sys.stderr, flush=True)
    sys.exit(2)
elif mode == "same_error":
    if rank == 1:
        print("WARNING: shard 3 of worker 1 is short", flush=True)
    else:
        time.sleep(1)
    print("WARNING: the dataset has no manifest", flush=True)
    print("ERROR: --num_classes 5 cannot hold the labels 1..10", file=sys.stderr, flush=True)
    sys.exit(2)
elif mode == "wait":
    received = []
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda signum, frame: received.append(signal.Signals(signum).name))
    open(os.path.join(out_dir, "ready-{}".format(rank)), "w").close()
    deadline = time.time() + 60
    while not received and time.time() < deadline:
        time.sleep(0.05)
    open(os.path.join(out_dir, "got-{}-{}".format(rank, "-".join(received) or "nothing")), "w").close()
    sys.exit(0 if received else 1)
elif mode == "stuck" and rank == 1:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    open(os.path.join(out_dir, "ready-1"), "w").close()
    time.sleep(120)
    sys.exit(1)
elif mode in ("ctrl_c", "stuck"):
    received = []
    signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    signal.signal(signal.SIGTERM, lambda signum, frame: open(os.path.join(out_dir, "terminated-{}".format(rank)),
                                                             "w").close())
    open(os.path.join(out_dir, "ready-{}".format(rank)), "w").close()
    deadline = time.time() + 60
    while not received and time.time() < deadline:
        time.sleep(0.05)
    if rank == 0:
        time.sleep(2)
        open(os.path.join(out_dir, "stopped-0"), "w").close()
    sys.exit(130 if received else 1)
