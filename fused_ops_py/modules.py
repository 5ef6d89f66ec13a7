"""nn.Module drop-ins built on the functional ops."""

import torch
from torch import nn

from .ops.bias_scale_relu import fused_bias_scale_relu
from .ops.cross_entropy import fused_cross_entropy
from .ops.dyt import fused_dyt
from .ops.linear_cross_entropy import fused_linear_cross_entropy
from .ops.norm import fused_layer_norm, fused_rms_norm


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


class FusedDyT(nn.Module):
    """DyT, Dynamic Tanh ("Transformers without Normalization"), a drop-in for
    a norm: weight * tanh(alpha * x) + bias over the last dimension, with a
    learned scalar alpha (init_alpha), weight (ones) and bias (zeros, or
    None without one)."""

    def __init__(self, normalized_shape, init_alpha=0.5, bias=True, device=None, dtype=None):
        super().__init__()
        if not isinstance(normalized_shape, int):
            (normalized_shape,) = normalized_shape  # one dimension, as the weight's
        self.normalized_shape = normalized_shape
        self.init_alpha = float(init_alpha)
        self.alpha = nn.Parameter(torch.full((1,), self.init_alpha, device=device, dtype=dtype))
        self.weight = nn.Parameter(torch.ones(normalized_shape, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(normalized_shape, device=device, dtype=dtype)) if bias else None

    def forward(self, x):
        return fused_dyt(x, self.alpha, self.weight, self.bias)

    def extra_repr(self):
        return f"{self.normalized_shape}, init_alpha={self.init_alpha}, bias={self.bias is not None}"


class FusedLayerNorm(nn.LayerNorm):
    """torch.nn.LayerNorm with the fused kernel: the same constructor,
    parameters, state_dict keys, initialization and repr (it is a subclass),
    so checkpoints load both ways and models can swap one for the other."""

    def forward(self, x):
        return fused_layer_norm(x, self.weight, self.bias, self.eps, self.normalized_shape)


class _TorchRMSNorm(nn.Module):
    """torch.nn.RMSNorm for torches before 2.4, which lack it."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.elementwise_affine:
            nn.init.ones_(self.weight)

    def extra_repr(self):
        return "{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}".format(**self.__dict__)


class FusedRMSNorm(getattr(nn, "RMSNorm", _TorchRMSNorm)):
    """torch.nn.RMSNorm with the fused kernel (a subclass on torch >= 2.4):
    the same constructor, parameters, state_dict keys, initialization and
    repr. eps=None means torch.finfo(x.dtype).eps, as in torch. offset:
    x * rstd * (offset + weight), in fp32, as Gemma's RMSNorm with 1.0 (whose
    weight starts at zeros: set it so)."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None, offset=0.0):
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine, device=device, dtype=dtype)
        self.offset = float(offset)

    def forward(self, x):
        return fused_rms_norm(x, self.weight, self.eps, self.normalized_shape, self.offset)

    def extra_repr(self):
        return super().extra_repr() + (f", offset={self.offset}" if self.offset else "")


class _CrossEntropyLossBase(nn.Module):
    """The options of torch.nn.CrossEntropyLoss the fused losses take (no
    class weights), and a softcap."""

    def __init__(self, ignore_index=-100, reduction="mean", label_smoothing=0.0, softcap=None):
        super().__init__()
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.label_smoothing = label_smoothing
        self.softcap = softcap

    def extra_repr(self):
        return (
            f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
            f"label_smoothing={self.label_smoothing}, softcap={self.softcap}"
        )


class FusedCrossEntropyLoss(_CrossEntropyLossBase):
    """torch.nn.CrossEntropyLoss over the last dimension of the logits
    (fused_cross_entropy), with an optional softcap. forward(input, target)."""

    def forward(self, input, target):
        return fused_cross_entropy(
            input,
            target,
            ignore_index=self.ignore_index,
            label_smoothing=self.label_smoothing,
            reduction=self.reduction,
            softcap=self.softcap,
        )


class FusedLinearCrossEntropyLoss(_CrossEntropyLossBase):
    """The cross-entropy of a linear layer's output without all its logits
    at once (fused_linear_cross_entropy): forward(input, linear_weight,
    target, linear_bias=None), the weight and bias those of the model's
    output layer."""

    def forward(self, input, linear_weight, target, linear_bias=None):
        return fused_linear_cross_entropy(
            input,
            linear_weight,
            target,
            linear_bias=linear_bias,
            ignore_index=self.ignore_index,
            label_smoothing=self.label_smoothing,
            reduction=self.reduction,
            softcap=self.softcap,
        )
