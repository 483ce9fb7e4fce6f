"""What this machine's CPU does to int8 arithmetic in the runtimes that verify artifacts.

On x86-64 without VNNI (AVX2 or AVX-512 alone), ONNX Runtime multiplies uint8 activations by int8
weights with VPMADDUBSW, which adds each pair of products into an int16 and saturates: a layer whose
activations and weights both span their ranges loses whole bits of its result (int8 activations are
shifted to uint8 first, so int8 × int8 saturates too). ONNX Runtime's quantization guide names the
remedy: uint8 activations with uint8 weights (no saturation), or 7-bit weights (`reduce_range`).
With VNNI (VPDPBUSD) and on ARM the products are summed in int32 and nothing saturates.
"""

from __future__ import annotations

import functools
import platform

VNNI_FLAGS = ("avx512_vnni", "avx_vnni")


def cpu_kind() -> str | None:
    """"x86" or "arm" for this machine's CPU (the kinds an .ort is laid out for: edgekit.core.formats.ORT_PLATFORMS),
    else None."""
    machine = platform.machine().lower()
    return "x86" if machine in ("x86_64", "amd64", "i686") else "arm" if machine.startswith(("aarch64", "arm")) else None


@functools.cache
def int8_products_saturate() -> bool:
    """True on an x86-64 CPU without VNNI, where ONNX Runtime's uint8 × int8 kernels saturate."""
    try:
        with open("/proc/cpuinfo") as f:
            cpuinfo = f.read()
    except OSError:
        cpuinfo = None
    return saturates(platform.machine(), cpuinfo)


def saturates(machine: str, cpuinfo: str | None) -> bool:
    """The rule behind int8_products_saturate, for a machine name and the text of /proc/cpuinfo (None
    where there is none: not Linux, where the kernels are assumed to saturate, as uint8 × uint8 is
    right everywhere)."""
    if machine.lower() not in ("x86_64", "amd64"):
        return False
    if cpuinfo is None:
        return True
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), None)
    if flags is None:
        return True
    return not any(flag in flags for flag in VNNI_FLAGS)
