"""DDP and FSDP2 (fully_shard) training steps on 2 GPUs: a model with the
fused modules gives the loss and gradients of the same model with torch's
modules. Skipped without 2 GPUs."""

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import requires_gpu

import fused_ops_py as fo

WIDTH, STEPS = 256, 3


def make_model(fused, device):
    torch.manual_seed(0)
    norm = fo.FusedLayerNorm if fused else torch.nn.LayerNorm
    rms = fo.FusedRMSNorm if fused else torch.nn.RMSNorm
    return torch.nn.Sequential(
        torch.nn.Linear(WIDTH, WIDTH),
        norm(WIDTH),
        torch.nn.GELU(),
        torch.nn.Linear(WIDTH, WIDTH),
        rms(WIDTH),
        torch.nn.Linear(WIDTH, 1),
    ).to(device)


def train(model, rank, wrap):
    model = wrap(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(100 + rank)  # each rank its own batch
    losses = []
    for _ in range(STEPS):
        x = torch.randn(64, WIDTH, generator=generator).cuda(rank)
        target = torch.randn(64, 1, generator=generator).cuda(rank)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        grads = [p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad for p in model.parameters()]
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses), [g.detach().clone() for g in grads]


def worker(rank, port, strategy, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=rank, world_size=2)
    torch.cuda.set_device(rank)
    if strategy == "ddp":

        def wrap(model):
            return torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    else:
        from torch.distributed.fsdp import fully_shard

        def wrap(model):
            for layer in model:
                if any(p.requires_grad for p in layer.parameters()):
                    fully_shard(layer)
            return fully_shard(model)

    fused_losses, fused_grads = train(make_model(True, rank), rank, wrap)
    torch_losses, torch_grads = train(make_model(False, rank), rank, wrap)
    worst = max((a - b).abs().max().item() / (b.abs().max().item() + 1e-12) for a, b in zip(fused_grads, torch_grads))
    results[rank] = (
        (fused_losses - torch_losses).abs().max().item(),
        worst,
        fused_losses.tolist(),
        torch_losses.tolist(),
    )
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@requires_gpu(2)
@pytest.mark.skipif(not hasattr(torch.nn, "RMSNorm"), reason="needs torch.nn.RMSNorm (torch >= 2.4)")
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_training_step_matches_torch_modules(strategy):
    if strategy == "fsdp2":
        pytest.importorskip("torch.distributed.fsdp", reason="FSDP2 needs torch >= 2.6")
        from torch.distributed import fsdp

        if not hasattr(fsdp, "fully_shard"):
            pytest.skip("this torch has no torch.distributed.fsdp.fully_shard")
    results = mp.Manager().dict()
    mp.spawn(worker, args=(free_port(), strategy, results), nprocs=2, join=True)
    for rank in range(2):
        loss_diff, grad_diff, fused_losses, torch_losses = results[rank]
        print(
            f"{strategy} rank {rank}: fused losses {fused_losses} torch losses {torch_losses}; "
            f"max loss diff {loss_diff:.2e}, max relative grad diff {grad_diff:.2e}"
        )
        assert loss_diff <= 1e-5 * max(abs(v) for v in torch_losses)
        assert grad_diff < 1e-3
