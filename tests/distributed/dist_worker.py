"""One rank of tests/distributed/test_distributed.py: trains a small model 3 optimizer
steps in each way of wrapping it, uncompiled and compiled with fusionstitch, and saves
every parameter and gradient (whole tensors, also of sharded ones) for the test to compare.

    python tests/distributed/dist_worker.py RANK WORLD OUT_DIR

Rank 0 opens the rendezvous (a TCPStore on 127.0.0.1, port chosen by the kernel) and
writes its port to OUT_DIR/port; the other ranks read it, so no port is guessed. gloo,
CPU only. Writes OUT_DIR/rank<R>.pt: {variant: {"params", "grads", "stats", "skip"}}.
"""
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 3
# DDP's and DDPOptimizer's bucket size: Dynamo refuses one below DDP's first bucket
# (1 MiB), so each 512x512 weight (1 MiB) fills a bucket and the graph splits there
BUCKET_MB = 1


class Block(nn.Module):
    def __init__(self, n: int, m: int):
        super().__init__()
        self.lin, self.norm = nn.Linear(n, m), nn.LayerNorm(m)

    def forward(self, x):
        return self.norm(F.gelu(self.lin(x))).tanh()


class Net(nn.Module):
    # a class of the user's (Dynamo does not start tracing in torch.nn's own modules:
    # torch.compile(DDP(nn.Sequential(...))) would compile nothing)
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(16, 512), Block(512, 512), Block(512, 512)])
        self.head = nn.Linear(512, 4)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _whole(t: torch.Tensor) -> torch.Tensor:
    """A DTensor (FSDP2's sharded parameters and gradients) gathered whole."""
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().clone()


def train(wrap, rank: int) -> dict:
    """3 SGD steps (momentum) of Net wrapped by `wrap`, each rank on its own data."""
    import fusionstitch
    torch._dynamo.reset()
    fusionstitch.reset_stats()
    torch.manual_seed(0)   # the same initial parameters on every rank and in every run
    model = Net()
    net = wrap(model)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    data = torch.Generator().manual_seed(100 + rank)
    for _ in range(STEPS):
        x, y = torch.randn(8, 16, generator=data), torch.randn(8, 4, generator=data)
        opt.zero_grad()
        F.mse_loss(net(x), y).backward()
        opt.step()
    named = list(model.named_parameters())
    return {"params": {n: _whole(p) for n, p in named},
            "grads": {n: _whole(p.grad) for n, p in named},
            "stats": fusionstitch.stats()}


def variants(world: int) -> dict:
    ddp = dict(bucket_cap_mb=BUCKET_MB)

    def fsdp2(compile_blocks: bool):
        def wrap(m):
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard
            mesh = init_device_mesh("cpu", (world,))
            for b in m.blocks:
                if compile_blocks:
                    b.compile(backend="fusionstitch")   # in place: names stay
                fully_shard(b, mesh=mesh)
            fully_shard(m, mesh=mesh)
            return m
        return wrap

    return {
        "ddp": lambda m: DDP(m, **ddp),
        "ddp_of_compiled": lambda m: DDP(torch.compile(m, backend="fusionstitch"), **ddp),
        "compiled_ddp": lambda m: torch.compile(DDP(m, **ddp), backend="fusionstitch"),
        "fsdp2": fsdp2(False),
        "fsdp2_compiled_blocks": fsdp2(True),
    }


def fsdp2_unsupported() -> str | None:
    """Why FSDP2 cannot run here, or None."""
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError as e:
        return f"this torch has no FSDP2 (torch.distributed.fsdp.fully_shard): {e}"
    return None


def main() -> None:
    rank, world, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")   # gloo's pairs on the loopback
    port_file = os.path.join(out, "port")
    if rank == 0:
        store = dist.TCPStore("127.0.0.1", 0, world, is_master=True,
                              wait_for_workers=False)   # they need the port first
        with open(port_file + ".tmp", "w") as f:
            f.write(str(store.port))
        os.replace(port_file + ".tmp", port_file)
    else:
        deadline = time.monotonic() + 60
        while not os.path.exists(port_file):
            if time.monotonic() > deadline:
                raise TimeoutError("rank 0 wrote no port")
            time.sleep(0.05)
        with open(port_file) as f:
            store = dist.TCPStore("127.0.0.1", int(f.read()), world, is_master=False)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    results = {}
    skip_fsdp = fsdp2_unsupported()
    for name, wrap in variants(world).items():
        if name.startswith("fsdp2") and skip_fsdp:
            results[name] = {"skip": skip_fsdp}
            continue
        start = time.perf_counter()
        try:
            results[name] = train(wrap, rank)
        except Exception:
            # every rank fails alike (the same program), so no rank waits on another
            results[name] = {"error": traceback.format_exc()}
        results[name]["seconds"] = time.perf_counter() - start
        dist.barrier()
    torch.save(results, os.path.join(out, f"rank{rank}.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
