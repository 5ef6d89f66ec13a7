"""Train the same small MLP twice from the same weights: once with the fused
ops (FusedLayerNorm, FusedBiasScaleReLU, square, reduce_sum), once with plain
torch ops (nn.LayerNorm, relu, square, sum), and
show that the losses and the trained weights agree. On the GPU when there is
one, else on the CPU."""

import copy
import statistics
import time

import torch
from torch import nn

import fused_ops_py
from fused_ops_py import FusedBiasScaleReLU, FusedLayerNorm, reduce_sum, square

FEATURES, HIDDEN, BATCH, STEPS, SCALE = 64, 256, 512, 60, 0.5
TIMINGS = 3  # each training timed this often on copies, in turns: the median


class TorchBiasScaleReLU(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.zeros(features))

    def forward(self, x):
        return torch.relu(x * self.scale + self.bias)


def make_model(norm, activation, device):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(FEATURES, HIDDEN, bias=False),
        norm(HIDDEN),
        activation(HIDDEN, SCALE),
        nn.Linear(HIDDEN, HIDDEN, bias=False),
        activation(HIDDEN, SCALE),
        nn.Linear(HIDDEN, 1),
    )
    return model.to(device)


def train(model, loss_fn, inputs, targets, steps=STEPS):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(
        f"fused-ops-py {fused_ops_py.__version__} demo on {device} "
        f"({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'no GPU: CPU kernels'})"
    )
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(BATCH, FEATURES, generator=generator).to(device)
    targets = (inputs[:, :1] * inputs[:, 1:2]).sin().to(device)

    def fused_loss(pred, target):
        return reduce_sum(square(pred - target)) / pred.numel()

    def torch_loss(pred, target):
        return (pred - target).square().sum() / pred.numel()

    fused_model = make_model(FusedLayerNorm, FusedBiasScaleReLU, device)
    torch_model = make_model(nn.LayerNorm, TorchBiasScaleReLU, device)
    # two untimed steps on copies: the first steps pay one-time imports (the
    # optimizer's, autograd's) that the timings should not include
    for model, loss_fn in ((fused_model, fused_loss), (torch_model, torch_loss)):
        train(copy.deepcopy(model), loss_fn, inputs, targets, steps=2)
    seconds = {fused_loss: [], torch_loss: []}
    for _ in range(TIMINGS):  # in turns, so a busy moment of the machine hits both
        for model, loss_fn in ((fused_model, fused_loss), (torch_model, torch_loss)):
            start = time.perf_counter()
            train(copy.deepcopy(model), loss_fn, inputs, targets)
            seconds[loss_fn].append(time.perf_counter() - start)
    fused_seconds, torch_seconds = (statistics.median(seconds[f]) for f in (fused_loss, torch_loss))
    fused_losses = train(fused_model, fused_loss, inputs, targets)
    torch_losses = train(torch_model, torch_loss, inputs, targets)

    print(f"{'step':>5} {'fused loss':>12} {'torch loss':>12}")
    for step in range(0, STEPS, 10):
        print(f"{step:>5} {fused_losses[step]:>12.6f} {torch_losses[step]:>12.6f}")
    print(f"{STEPS - 1:>5} {fused_losses[-1]:>12.6f} {torch_losses[-1]:>12.6f}")

    worst_weight = max(
        ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()
        for a, b in zip(fused_model.parameters(), torch_model.parameters())
    )
    worst_loss = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(fused_losses, torch_losses))
    print(
        f"loss fell from {fused_losses[0]:.4f} to {fused_losses[-1]:.4f}; "
        f"{STEPS} steps (median of {TIMINGS}): fused {fused_seconds:.3f} s, torch {torch_seconds:.3f} s"
    )
    print(f"largest relative difference: loss {worst_loss:.2e}, trained weights {worst_weight:.2e}")
    matches = worst_loss < 1e-3 and worst_weight < 1e-3 and fused_losses[-1] < fused_losses[0]
    print(
        "MATCH: the fused model trains like the torch model"
        if matches
        else "MISMATCH: the fused model diverged from the torch model"
    )
    return 0 if matches else 1
