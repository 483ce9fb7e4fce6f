"""Path planning over the converter graph: cheapest route, whole plan checked, clear failures."""

from __future__ import annotations

import sys

import pytest

from edgekit.core.errors import BadInput, MissingDependency
from edgekit.core.quant import Fallback, Precision, QuantSpec, parse_overrides
from edgekit.engine.graph import Graph
from edgekit.converters.base import MANIFEST, Converter, converters


def edge(name, source, target, cost=1.0, precisions=("fp32",), extra="torch", preserve=False):
    attrs = {"name": name, "source": source, "target": target, "cost": cost, "precisions": precisions, "extra": extra}
    if preserve:
        attrs["accepts"] = classmethod(lambda cls, i, o: i == o)
    return type(name, (Converter,), attrs)


def test_the_real_graph_has_every_builtin_edge_and_plans_one_step_routes():
    table = converters()
    assert set(MANIFEST) <= set(table)
    graph = Graph()
    for target in ("tflite", "pte", "onnx"):
        plan = graph.route("torch-export", target)
        assert [s.converter.target for s in plan.steps] == [target]
        assert plan.formats == ["torch-export", target]


def test_cheapest_route_wins_over_fewer_steps():
    direct = edge("direct", "torch", "ort", cost=5.0)
    to_onnx = edge("to_onnx", "torch", "onnx", cost=1.0)
    onnx_to_ort = edge("onnx_to_ort", "onnx", "ort", cost=1.0, preserve=True)
    plan = Graph([direct, to_onnx, onnx_to_ort]).route("torchscript", "ort")
    assert [s.converter.name for s in plan.steps] == ["to_onnx", "onnx_to_ort"]
    assert plan.cost == 2.0
    assert plan.formats == ["torchscript", "onnx", "ort"]


def test_precision_is_produced_by_the_edge_that_can_make_it_and_carried_through():
    to_onnx = edge("to_onnx", "torch", "onnx")
    quantize = edge("quantize", "onnx", "onnx", precisions=("int8",))
    to_ort = edge("to_ort", "onnx", "ort", preserve=True)
    plan = Graph([to_onnx, quantize, to_ort]).route("torch-export", "ort", "int8")
    assert [(s.converter.name, s.precision) for s in plan.steps] == [("to_onnx", "fp32"), ("quantize", "int8"), ("to_ort", "int8")]


def test_no_route_names_what_is_reachable():
    every = "fp16/fp32/int8/int8-dynamic"
    # Nothing produces a SavedModel; the reachable list grows as targets are added, so only its start is fixed.
    with pytest.raises(BadInput, match=r"no route from torch-export to tf-savedmodel at fp32.*"
                                       r"reachable from torch-export: onnx \(") as info:
        Graph().route("torch-export", "tf-savedmodel")
    assert info.value.exit_code == 2
    assert f"ort ({every})" in info.value.fix  # reached through onnx, at every precision onnx has
    assert "ptl (fp32/int8)" in info.value.fix


def test_a_precision_no_edge_produces():
    graph = Graph([edge("to_onnx", "torch", "onnx")])
    with pytest.raises(BadInput, match=r"no route from torch-export to onnx at int8 .*reachable from torch-export: onnx \(fp32\)"):
        graph.route("torch-export", "onnx", "int8")


def test_unknown_precision():
    with pytest.raises(BadInput, match="unknown precision 'int4'"):
        Graph().route("torch-export", "tflite", "int4")


def test_the_users_words_for_a_precision_are_one_table():
    """--precision, the API and a check config read the same words: canonical names, any case, `_` for `-`, and
    the float ones spelled out; what the code compares is the member, and the artifact's name uses its value."""
    assert [Precision.parse(w) for w in ("FP32", " float16 ", "int8_dynamic", "int4-weights")] == [
        Precision.FP32, Precision.FP16, Precision.INT8_DYNAMIC, Precision.INT4_WEIGHTS]
    assert QuantSpec("float32").precision is Precision.FP32 and QuantSpec("Int8").to_json()["precision"] == "int8"
    assert Graph().route("torch-export", "onnx", "float32").precision is Precision.FP32
    with pytest.raises(BadInput, match="unknown precision 'int4' — use one of fp32, fp16, int8, int8-dynamic"):
        Precision.parse("int4")
    assert [Precision(p).weight_only for p in ("int8", "int8-weights", "int4-weights")] == [False, True, True]
    assert QuantSpec("int8", overrides=parse_overrides(["a", "b=int16"])).overrides[1].precision is Fallback.INT16


def test_missing_dependency_names_the_extra_to_install(monkeypatch):
    # Make litert-torch unimportable, as on a machine installed without the tflite extra.
    monkeypatch.setitem(sys.modules, "litert_torch", None)
    graph = Graph()
    with pytest.raises(MissingDependency, match=r"torch → tflite converter needs the 'tflite' extra \(missing: litert_torch\)") as info:
        graph.route("torch-export", "tflite")
    assert info.value.exit_code == 4
    assert info.value.fix == "pip install 'edgekit[tflite]'"
    # The other routes still plan.
    assert graph.route("torch-export", "onnx").formats == ["torch-export", "onnx"]


def test_an_available_route_is_preferred_over_a_cheaper_uninstalled_one():
    cheap_missing = edge("cheap_missing", "torch", "onnx", cost=0.1, extra="tflite")
    cheap_missing.missing = classmethod(lambda cls: ("not_installed_module",))
    installed = edge("installed", "torch", "onnx", cost=3.0)
    plan = Graph([cheap_missing, installed]).route("torch-export", "onnx")
    assert [s.converter.name for s in plan.steps] == ["installed"]
