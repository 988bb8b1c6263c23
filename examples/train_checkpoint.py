#!/usr/bin/env python3
"""A small, real training loop that checkpoints and resumes, runnable on CPU.

Fits a linear model y = w.x + b by minibatch SGD on data generated from the
step number alone, so a run resumed from a checkpoint computes exactly what an
uninterrupted run computes. Checkpoints are Hugging Face Trainer style:
$BRAMBLE_CHECKPOINT_DIR/checkpoint-<step>/state.json, then trainer_state.json
written last as the "complete" marker. Resumes from $BRAMBLE_RESUME_FROM.
Prints the final parameters as one JSON line: "final {...}".
"""
import argparse
import json
import os
import random
import time

TRUE_W = [0.5, -1.25, 2.0, 0.75]
TRUE_B = 0.3


def batch(step, size=16):
    rng = random.Random(1000003 * step + 17)
    xs = [[rng.uniform(-1, 1) for _ in TRUE_W] for _ in range(size)]
    ys = [sum(w * x for w, x in zip(TRUE_W, row)) + TRUE_B + rng.gauss(0, 0.01)
          for row in xs]
    return xs, ys


def train_step(state, step, lr):
    xs, ys = batch(step)
    w, b = state["w"], state["b"]
    gw, gb, loss = [0.0] * len(w), 0.0, 0.0
    for row, y in zip(xs, ys):
        err = sum(wi * xi for wi, xi in zip(w, row)) + b - y
        loss += err * err / len(xs)
        for i, xi in enumerate(row):
            gw[i] += 2 * err * xi / len(xs)
        gb += 2 * err / len(xs)
    state["w"] = [wi - lr * g for wi, g in zip(w, gw)]
    state["b"] = b - lr * gb
    state["step"] = step
    return loss


def save(ckpt_dir, state):
    path = os.path.join(ckpt_dir, "checkpoint-%d" % state["step"])
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "state.json"), "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    with open(os.path.join(path, "trainer_state.json"), "w") as f:  # marker, last
        json.dump({"global_step": state["step"]}, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--step-time", type=float, default=0.2)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--print-steps", action="store_true",
                    help="print every step with its wall-clock time")
    args = ap.parse_args()

    ckpt_dir = os.environ.get("BRAMBLE_CHECKPOINT_DIR") or "./ckpt"
    resume = os.environ.get("BRAMBLE_RESUME_FROM", "")
    node = os.environ.get("BRAMBLE_NODE_NAME", "?")
    attempt = os.environ.get("BRAMBLE_ATTEMPT", "?")
    state = {"w": [0.0] * len(TRUE_W), "b": 0.0, "step": 0}
    if resume:
        with open(os.path.join(resume, "state.json")) as f:
            state = json.load(f)
        print("attempt %s on %s: resumed from step %d (%s)"
              % (attempt, node, state["step"], resume), flush=True)
    else:
        print("attempt %s on %s: starting from scratch" % (attempt, node), flush=True)

    for step in range(state["step"] + 1, args.steps + 1):
        loss = train_step(state, step, args.lr)
        if args.print_steps:
            print("step %d t=%.3f" % (step, time.time()), flush=True)
        if step % args.every == 0:
            save(ckpt_dir, state)
            print("step %d loss %.6f (checkpoint saved)" % (step, loss), flush=True)
        time.sleep(args.step_time)
    print("final " + json.dumps({"w": state["w"], "b": state["b"],
                                 "step": state["step"]}), flush=True)


if __name__ == "__main__":
    main()
