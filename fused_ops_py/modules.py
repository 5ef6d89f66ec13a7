"""nn.Module drop-ins built on the functional ops."""

import torch
from torch import nn

from .functional import fused_bias_scale_relu


class FusedBiasScaleReLU(nn.Module):
    """relu(x * scale + bias) with a learnable bias of shape [features],
    initialised to zeros, broadcast over the last dimension of x."""

    def __init__(self, features, scale=1.0, device=None, dtype=None):
        super().__init__()
        self.features = features
        self.scale = float(scale)
        self.bias = nn.Parameter(torch.zeros(features, device=device, dtype=dtype))

    def forward(self, x):
        return fused_bias_scale_relu(x, self.bias, self.scale)

    def extra_repr(self):
        return f"features={self.features}, scale={self.scale}"
