#!/usr/bin/env python3
"""steptime_job.py - the training-like job of bench/replica_steptime.py.

Each step does a fixed amount of CPU work (not a fixed time), so a step takes
longer when something else wants the same cores. Every --every steps it saves a
checkpoint of --mib MiB in --files files, Hugging Face style
($BRAMBLE_CHECKPOINT_DIR/checkpoint-<step>/, trainer_state.json written last),
with bytes that differ from the previous checkpoint's (as weights do, so nothing
is deduplicated), and keeps only the newest two on its disk. Writes one line per
step to --out: "step STEP START SECONDS" for the step's work, "save STEP START
SECONDS" for a save (START: the wall clock, SECONDS: how long it took).
"""
import argparse
import json
import os
import shutil
import time


def work(n):
    """n rounds of a small integer mix: about 0.1 s per 1,000,000 here."""
    x = 1
    for i in range(n):
        x = (x * 1103515245 + i) & 0xFFFFFFFF
    return x


def save(ckpt_dir, step, blobs):
    path = os.path.join(ckpt_dir, "checkpoint-%d" % step)
    os.makedirs(path, exist_ok=True)
    for i, b in enumerate(blobs):
        b[:8] = step.to_bytes(8, "little")  # new weights, a new hash
        with open(os.path.join(path, "shard-%d.bin" % i), "wb") as f:
            f.write(b)
    with open(os.path.join(path, "trainer_state.json"), "w") as f:  # marker, last
        json.dump({"global_step": step}, f)
    old = sorted((int(d.split("-")[1]) for d in os.listdir(ckpt_dir)
                  if d.startswith("checkpoint-")), reverse=True)[2:]
    for s in old:
        shutil.rmtree(os.path.join(ckpt_dir, "checkpoint-%d" % s), ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=220)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--work", type=int, default=2000000)
    ap.add_argument("--mib", type=int, default=128)
    ap.add_argument("--kib", type=int, default=0, help="the size in KiB instead")
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    ckpt_dir = os.environ.get("BRAMBLE_CHECKPOINT_DIR") or "./ckpt"
    os.makedirs(ckpt_dir, exist_ok=True)
    per = ((args.kib << 10) if args.kib else (args.mib << 20)) // args.files
    blobs = [bytearray(os.urandom(per)) for _ in range(args.files)]
    with open(args.out, "w") as out:
        for step in range(1, args.steps + 1):
            w0, t0 = time.time(), time.perf_counter()
            work(args.work)
            w1, t1 = time.time(), time.perf_counter()
            out.write("step %d %.6f %.6f\n" % (step, w0, t1 - t0))
            if step % args.every == 0:
                save(ckpt_dir, step, blobs)
                out.write("save %d %.6f %.6f\n" % (step, w1, time.perf_counter() - t1))
            out.flush()


if __name__ == "__main__":
    main()
