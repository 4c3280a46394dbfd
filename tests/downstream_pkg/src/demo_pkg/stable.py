# SPDX-License-Identifier: MIT
"""demo_pkg.stable.negate: an op on torch's stable C++ API alone (csrc/negate.cpp), declared with
stable_abi=True: one build, or one prebuilt library shipped in the wheel, serves every torch from
jitops' floor up and any Python."""

import os

import torch

from jitops import Extension

negate_extension = Extension(
    "negate",
    ["csrc/negate.cpp"],
    namespace="demo_pkg_stable",
    root=os.path.dirname(os.path.abspath(__file__)),
    version="1.0.0",
    cuda="never",
    prebuilt_dir="prebuilt",
    stable_abi=True,
)


@negate_extension.register_fake("negate")
def _(x):
    return torch.empty_like(x)


def negate(x: torch.Tensor) -> torch.Tensor:
    """-x, by demo_pkg's stable-ABI op (built on first use, or its prebuilt loaded)."""
    return negate_extension.load().ops.negate(x)
