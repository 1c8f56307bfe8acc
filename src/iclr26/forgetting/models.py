"""Networks: a feature extractor phi(x) and a linear head h(z) = W z + b.

* :class:`MLPFeatures`: 64 -> 256 -> 256 -> d_feat with a ReLU after every layer; the feature is
  the last ReLU output (CPU scale).
* :class:`ResNet18Features`: the CIFAR-style ResNet-18 of the paper (3x3 stem, no max-pool, four
  stages of two BasicBlocks, widths nf*(1, 2, 4, 8), global average pooling; Mammoth uses nf=64).
* :class:`ContinualNet`: features + one linear layer over all classes. In class-incremental
  learning (CIL, single head) the logits of all output units are used; in task-incremental learning
  (TIL, multi-head) task t's head is the block of output units of the classes task t owns, and a
  sample only sees its own task's units (:meth:`ContinualNet.task_logits`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MLPFeatures(nn.Module):
    """phi(x) = ReLU(W3 ReLU(W2 ReLU(W1 x))); ``out_dim`` = d_feat."""

    def __init__(self, in_dim: int, hidden: tuple[int, ...] = (256, 256), d_feat: int = 32):
        super().__init__()
        dims = [in_dim, *hidden, d_feat]
        layers: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.net = nn.Sequential(*layers)
        self.out_dim = d_feat

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.flatten(1))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18Features(nn.Module):
    """CIFAR ResNet-18 feature extractor (output: the 8*nf-d average-pooled feature)."""

    def __init__(self, in_channels: int = 3, nf: int = 64, blocks: tuple[int, ...] = (2, 2, 2, 2)):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, nf, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(nf)
        layers, in_planes = [], nf
        for i, n in enumerate(blocks):
            planes = nf * 2**i
            for j in range(n):
                layers.append(BasicBlock(in_planes, planes, stride=2 if (i > 0 and j == 0) else 1))
                in_planes = planes
        self.layers = nn.Sequential(*layers)
        self.out_dim = in_planes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layers(out)
        return F.adaptive_avg_pool2d(out, 1).flatten(1)


class ContinualNet(nn.Module):
    """features + linear head over all ``n_classes`` output units.

    multi_head: TIL (True): task t's head is the units ``task_classes[t]``; CIL (False): one head.
    """

    def __init__(self, features: nn.Module, n_classes: int, task_classes: list[list[int]], multi_head: bool = False):
        super().__init__()
        self.features = features
        self.head = nn.Linear(features.out_dim, n_classes)
        self.multi_head = multi_head
        mask = torch.zeros(len(task_classes), n_classes, dtype=torch.bool)
        for t, cls in enumerate(task_classes):
            mask[t, cls] = True
        self.register_buffer("task_mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))

    def task_logits(self, logits: torch.Tensor, task_ids: torch.Tensor) -> torch.Tensor:
        """Logits restricted to each sample's own task head (other units set to -inf)."""
        return logits.masked_fill(~self.task_mask[task_ids], float("-inf"))

    def seen_logits(self, logits: torch.Tensor, n_seen_tasks: int) -> torch.Tensor:
        """CIL evaluation: argmax over the classes of the tasks seen so far only."""
        seen = self.task_mask[:n_seen_tasks].any(0)
        return logits.masked_fill(~seen, float("-inf"))
