#!/usr/bin/env python3
"""A small, real PyTorch DistributedDataParallel job that bramble runs as a gang.

What it shows: one process per rank (one per node by default), joined with
torch.distributed as it comes (init_method="env://": RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT from bramble), gloo on CPU or nccl on GPU, gradients averaged by DDP, checkpoints written by
rank 0 only, and a whole-gang resume from $BRAMBLE_RESUME_FROM.

Why it is deterministic: the model starts from a fixed seed, each step's
global batch is generated from the step number alone and each rank takes its
own slice of it (so it depends only on step and rank), plain SGD keeps no state
but the parameters, and the checkpoint holds parameters, optimizer and step.
So a run killed and resumed from checkpoint-K computes steps K+1.. exactly as
an uninterrupted run does: the final parameters are bit-identical (printed as
float.hex() strings so equality can be checked exactly).

Nothing here is bramble-specific but the checkpoint dir and resume path: bramble
also sets GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME to the interface that holds the
node's address, so gloo does not use whatever the host name resolves to.
"""
import argparse
import datetime
import json
import os
import socket
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

IN, HIDDEN, SHARD = 4, 8, 16           # features, hidden units, samples per rank
TRUE_W = torch.tensor([0.5, -1.25, 2.0, 0.75])


def log(*a):
    print(*a, flush=True)


def batch(step, rank, world):
    """This rank's slice of step's global batch: a function of (step, rank)."""
    g = torch.Generator().manual_seed(1000003 * step + 17)
    x = torch.rand(world * SHARD, IN, generator=g) * 2 - 1
    y = (x @ TRUE_W).sin().unsqueeze(1) + 0.01 * torch.randn(world * SHARD, 1, generator=g)
    lo = rank * SHARD
    return x[lo:lo + SHARD], y[lo:lo + SHARD]


def save(ckpt_dir, step, model, opt):
    path = os.path.join(ckpt_dir, "checkpoint-%d" % step)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "model.pt"), "wb") as f:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                    "step": step}, f)
        f.flush()
        os.fsync(f.fileno())
    # The completeness marker, written last and atomically.
    tmp = os.path.join(path, ".trainer_state.json.tmp")
    with open(tmp, "w") as f:
        json.dump({"global_step": step}, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, os.path.join(path, "trainer_state.json"))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=5, help="checkpoint interval")
    ap.add_argument("--step-time", type=float, default=0.2, help="sleep per step (s)")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--out", help="rank 0 also writes the final JSON here")
    args = ap.parse_args()

    env = os.environ
    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    node_rank = env.get("NODE_RANK", "?")
    log("rank %d of %d on %s (%s) master %s:%s interface %s" % (
        rank, world, socket.gethostname(), env.get("BRAMBLE_NODE_NAME", "-"),
        env["MASTER_ADDR"], env["MASTER_PORT"], env.get("GLOO_SOCKET_IFNAME", "-")))

    use_cuda = torch.cuda.is_available() and env.get("CUDA_VISIBLE_DEVICES", "") != ""
    if use_cuda:
        device = torch.device("cuda", int(env.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if use_cuda else "gloo", init_method="env://",
                            timeout=datetime.timedelta(minutes=10))
    torch.use_deterministic_algorithms(True)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.Tanh(),
                                torch.nn.Linear(HIDDEN, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    start = 0
    resume = env.get("BRAMBLE_RESUME_FROM", "")
    if resume:
        ck = torch.load(os.path.join(resume, "model.pt"), map_location=device)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        start = ck["step"]
        log("rank %d/%d node %s resumed from %d" % (rank, world, node_rank, start))
    else:
        log("rank %d/%d node %s starting fresh" % (rank, world, node_rank))
    ddp = DDP(model, device_ids=[device.index] if use_cuda else None)

    ckpt_dir = env.get("BRAMBLE_CHECKPOINT_DIR") or "./ckpt"
    t0 = time.time()
    for step in range(start + 1, args.steps + 1):
        x, y = batch(step, rank, world)
        loss = torch.nn.functional.mse_loss(ddp(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()                  # DDP averages gradients over all ranks
        opt.step()
        if rank == 0 and (step % 10 == 0 or step == args.steps):
            log("step %d loss %.6f (%.1fs)" % (step, loss.item(), time.time() - t0))
        if step % args.every == 0 or step == args.steps:
            if rank == 0:
                save(ckpt_dir, step, model, opt)
            dist.barrier()               # no rank runs ahead of a checkpoint
        time.sleep(args.step_time)

    if rank == 0:
        params = {n: [float(v).hex() for v in p.detach().cpu().flatten().tolist()]
                  for n, p in model.named_parameters()}
        final = json.dumps({"step": max(start, args.steps), "params": params},
                           sort_keys=True)
        log("final " + final)
        if args.out:
            with open(args.out, "w") as f:
                f.write(final + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
