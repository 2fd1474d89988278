"""The PyTorch peer of `compare/run.py`: the same model, batch, optimizer and world size with
DistributedDataParallel (gloo on the CPU, one thread per rank; NCCL on a GPU), or one process for
the compute-only comparison. Prints one JSON line with the median step time. Started without
torchrun it is rank 0 of a world of one (DDP still buckets and all-reduces, as on one GPU).

    torchrun --nproc_per_node 2 compare/ddp_peer.py --steps 40 --batch 64     # DDP, 2 ranks
    python3 compare/ddp_peer.py --single --steps 40 --batch 64                # one process
    python3 compare/ddp_peer.py --single --threads 2 --steps 40 --batch 64    # one process, 2 threads
    python3 compare/ddp_peer.py --single --device cuda --steps 100            # one GPU (gpu-check.sh)
    python3 compare/ddp_peer.py --device cuda --steps 100                     # DDP, NCCL, world size 1
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def model(widths):
    layers = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(a, b))
        if i + 2 < len(widths):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=64, help="samples per rank")
    p.add_argument("--widths", default="784,2048,2048,2048,10")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--bucket-cap-mb", type=float, default=8.0)
    p.add_argument("--single", action="store_true", help="one process, no DDP")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (per rank)")
    p.add_argument("--device", default="cpu", help="cpu, or cuda (one process, one GPU)")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    widths = [int(w) for w in args.widths.split(",")]
    device = torch.device(args.device)
    net = model(widths).to(device)
    rank, world = 0, 1
    if not args.single:
        for key, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29517")):
            os.environ.setdefault(key, value)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        ids = [device.index or 0] if device.type == "cuda" else None
        net = nn.parallel.DistributedDataParallel(net, device_ids=ids, bucket_cap_mb=args.bucket_cap_mb)
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(args.batch, widths[0]).to(device)
    y = torch.randint(0, widths[-1], (args.batch,)).to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        # Zeroed in place, not set to None (PyTorch's default since 2.0): faster for PyTorch here,
        # since new gradients of 40 MB each step cost it page faults (Zen 5, one thread, medians of
        # 5 alternating rounds of 40 steps: 47.3 against 57.8 ms one process, 87.2 against 91.1 ms
        # under DDP).
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        sync()
        times.append(time.perf_counter() - start)
    if rank == 0:
        mode = "single" if args.single else "ddp"
        print(json.dumps({"mode": mode, "device": args.device, "world_size": world, "threads": args.threads,
                          "torch": torch.__version__,
                          # Over every step, as our report's median (a warm-up step or two barely
                          # moves the median of 40).
                          "step_ms": statistics.median(times) * 1e3}))
    if not args.single:
        dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
