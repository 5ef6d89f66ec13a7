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


def tiny_llama(device):
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=512,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to(device, torch.bfloat16).train()


def train_llama(model, rank, wrap, steps=4):
    """(losses, the first step's full gradients): AdamW on one batch a rank,
    the same each step, so the loss falls."""
    model = wrap(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 512, (4, 64), generator=torch.Generator().manual_seed(100 + rank)).cuda(rank)
    losses, first_grads = [], None
    for _ in range(steps):
        optimizer.zero_grad()
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        if first_grads is None:
            first_grads = [
                (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).float().clone()
                for p in model.parameters()
            ]
        optimizer.step()
        losses.append(loss.detach().float().item())
    return losses, first_grads


def fp8_worker(rank, port, results):
    from torch.distributed.fsdp import fully_shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=rank, world_size=2)
    torch.cuda.set_device(rank)

    def fsdp2(model):
        for layer in model.model.layers:
            fully_shard(layer)
        return fully_shard(model)

    def ddp(model):
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])

    runs = {}
    for name, wrap, fp8 in (("fsdp2_fp8", fsdp2, True), ("ddp_fp8", ddp, True), ("ddp_bf16", ddp, False)):
        model = tiny_llama(rank)
        replaced = fo.patch(model, fp8=fp8)
        kinds = {type(m).__name__ for m in model.modules()}
        runs[name] = (*train_llama(model, rank, wrap), replaced, "Float8Linear" in kinds)
    results[rank] = {
        name: (losses, [g.cpu() for g in grads], replaced, has_fp8)
        for name, (losses, grads, replaced, has_fp8) in runs.items()
    }
    dist.destroy_process_group()


@requires_gpu(2)
def test_fp8_patched_llama_trains_under_fully_shard():
    """patch(model, fp8=True), then fully_shard per decoder layer and the
    model: FSDP2 trains it to DDP's losses and gradients (the same FP8 casts
    of the same gathered weights), the loss falls, and its first loss is
    bf16's within FP8's rounding."""
    pytest.importorskip("transformers", reason="transformers is not installed")
    from torch.distributed import fsdp

    if not hasattr(fsdp, "fully_shard"):
        pytest.skip("this torch has no torch.distributed.fsdp.fully_shard")
    if torch.cuda.get_device_capability(0) < (8, 9):
        pytest.skip("FP8 GEMMs need compute capability 8.9")
    results = mp.Manager().dict()
    mp.spawn(fp8_worker, args=(free_port(), results), nprocs=2, join=True)
    for rank in range(2):
        runs = results[rank]
        fsdp_losses, fsdp_grads, replaced, has_fp8 = runs["fsdp2_fp8"]
        ddp_losses, ddp_grads, _, _ = runs["ddp_fp8"]
        bf16_losses, _, _, bf16_has_fp8 = runs["ddp_bf16"]
        print(
            f"rank {rank}: fsdp2 fp8 {fsdp_losses}, ddp fp8 {ddp_losses}, ddp bf16 {bf16_losses}; {replaced} replaced"
        )
        assert has_fp8 and not bf16_has_fp8
        assert fsdp_losses[-1] < 0.9 * fsdp_losses[0]
        for a, b in zip(fsdp_losses, ddp_losses):
            assert abs(a - b) <= 1e-2 * abs(b)
        worst = max((a - b).abs().max().item() / (b.abs().max().item() + 1e-12) for a, b in zip(fsdp_grads, ddp_grads))
        assert worst < 2e-2, worst
        assert abs(fsdp_losses[0] - bf16_losses[0]) <= 2e-2 * bf16_losses[0]
