"""The CPU rule that picks ONNX int8's types (edgekit.core.cpu): parsed from /proc/cpuinfo's text."""

from __future__ import annotations

import pytest

from edgekit.core.cpu import saturates

AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
AVX512_VNNI = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512bw avx512_vnni\n"
AVX_VNNI = "processor\t: 0\nflags\t\t: fpu avx2 avx_vnni\n"


@pytest.mark.parametrize("machine,cpuinfo,expected", [
    ("x86_64", AVX2, True),            # VPMADDUBSW: pairs of products saturate in int16
    ("x86_64", AVX512_VNNI, False),    # VPDPBUSD sums in int32
    ("x86_64", AVX_VNNI, False),
    ("AMD64", None, True),             # no /proc/cpuinfo (not Linux): assume it saturates
    ("x86_64", "processor\t: 0\n", True),  # no flags line
    ("aarch64", AVX2, False),          # ARM sums int8 products in int32
    ("arm64", None, False),
])
def test_saturation_rule(machine, cpuinfo, expected):
    assert saturates(machine, cpuinfo) is expected


def test_a_vnni_word_inside_another_flag_does_not_count():
    assert saturates("x86_64", "flags\t: avx2 avx512_vnnix\n") is True
