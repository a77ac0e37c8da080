"""torch modules over `quantized.Int8Weights`: the transformers backend's int8 layers.

Kept apart from quantized.py so that the lean forward, which needs only the arrays and
kernels, loads its weights without importing torch."""

from __future__ import annotations

import numpy as np
import torch

from .quantized import GROUP, KERNEL_MAX_ROWS, Int8Weights


class Int8Linear(torch.nn.Module):
    """Drop-in for `torch.nn.Linear` at inference time (see quantized.py's docstring)."""

    def __init__(self, linear: torch.nn.Linear, group: int = GROUP):
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.weights = Int8Weights(linear.weight, group)
        self.bias = (
            None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().float(), requires_grad=False)
        )

    @property
    def weight(self) -> torch.Tensor:
        # Code that inspects `.weight` (shapes, dtypes) sees the weights actually used.
        w = self.weights.dequantized
        assert w is not None  # made from a float matrix, so the float twin is kept
        return torch.from_numpy(w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features if x.numel() else 0
        if 0 < rows <= KERNEL_MAX_ROWS and x.dtype == torch.float32 and not x.requires_grad:
            flat = np.ascontiguousarray(x.detach().reshape(rows, self.in_features).numpy())
            out = torch.from_numpy(self.weights.matmul(flat, threads=torch.get_num_threads()))
            out = out.reshape(*x.shape[:-1], self.out_features)
        else:
            out = torch.nn.functional.linear(x, self.weight.to(x.dtype))
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 groups of {self.weights.in_features // self.weights.scales.shape[1]}"


def quantize_linears(module: torch.nn.Module, group: int = GROUP) -> int:
    """Replace every `torch.nn.Linear` below `module` by an `Int8Linear`; returns how many."""
    count = 0
    for name, child in list(module.named_children()):
        if type(child) is torch.nn.Linear:
            setattr(module, name, Int8Linear(child, group))
            count += 1
        else:
            count += quantize_linears(child, group)
    return count
