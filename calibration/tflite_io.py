"""Float inputs and outputs for an integer .tflite.

litert-torch's static int8 path always gives the model int8 inputs and outputs. edgekit's default
is float I/O, the way TFLiteConverter does it: a QUANTIZE op after each float input and a
DEQUANTIZE op before each float output, using the boundary tensors' own scale and zero-point.
The edit goes through the LiteRT flatbuffer object API (ai_edge_litert.schema_py_generated).
"""

from __future__ import annotations

_INTEGER_TYPES = ("INT8", "UINT8", "INT16")


def float_io(model_bytes: bytes) -> bytes:
    """`model_bytes` with float32 inputs/outputs in place of quantized ones (unchanged if it has float I/O)."""
    from ai_edge_litert import schema_py_generated as fb
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(model_bytes))
    integer = {getattr(fb.TensorType, t) for t in _INTEGER_TYPES}
    graph = model.subgraphs[0]

    def opcode(builtin: int) -> int:
        for i, oc in enumerate(model.operatorCodes):
            if max(oc.builtinCode, oc.deprecatedBuiltinCode) == builtin:
                return i
        oc = fb.OperatorCodeT()
        oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = builtin, min(builtin, 127), 2
        model.operatorCodes.append(oc)
        return len(model.operatorCodes) - 1

    def float_twin(index: int) -> int:
        """A float32 tensor named and shaped like tensor `index`, which is renamed."""
        old = graph.tensors[index]
        new = fb.TensorT()
        new.shape, new.shapeSignature, new.hasRank = old.shape, old.shapeSignature, old.hasRank
        new.type, new.buffer, new.name = fb.TensorType.FLOAT32, 0, old.name
        old.name = (old.name.decode() if isinstance(old.name, bytes) else old.name) + "_int8"
        graph.tensors.append(new)
        return len(graph.tensors) - 1

    def op(code: int, inputs: list[int], outputs: list[int]):
        o = fb.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = code, inputs, outputs
        return o

    remap_in, remap_out = {}, {}
    for pos, index in enumerate(list(graph.inputs)):
        if graph.tensors[index].type in integer and graph.tensors[index].quantization is not None:
            twin = float_twin(index)
            graph.operators.insert(0, op(opcode(fb.BuiltinOperator.QUANTIZE), [twin], [index]))
            graph.inputs[pos] = remap_in[index] = twin
    for pos, index in enumerate(list(graph.outputs)):
        if graph.tensors[index].type in integer and graph.tensors[index].quantization is not None:
            twin = float_twin(index)
            graph.operators.append(op(opcode(fb.BuiltinOperator.DEQUANTIZE), [index], [twin]))
            graph.outputs[pos] = remap_out[index] = twin
    if not (remap_in or remap_out):
        return model_bytes
    point_signatures(model, remap_in, remap_out)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def point_signatures(model, inputs: dict[int, int], outputs: dict[int, int]) -> int:
    """Point the entries of `model`'s (a flatbuffer ModelT) signatures of its main subgraph that name a tensor
    among the keys of `inputs` (their inputs) or `outputs` (their outputs) at the tensor it maps to. Returns how
    many entries moved."""
    moved = 0
    for sig in model.signatureDefs or []:
        if sig.subgraphIndex != 0:
            continue
        for entries, remap in ((sig.inputs, inputs), (sig.outputs, outputs)):
            for entry in entries or []:
                if entry.tensorIndex in remap:
                    entry.tensorIndex = remap[entry.tensorIndex]
                    moved += 1
    return moved
