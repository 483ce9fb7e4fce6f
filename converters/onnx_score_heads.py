"""Score heads in an ONNX graph: what int8 does to a detector's class scores, and what edgekit keeps back.

A score head is a Sigmoid that is not half of a SiLU and whose probabilities reach a graph output through
data movement only (YOLO-style class scores beside boxes, an objectness map). Two things go wrong at int8,
measured on a real YOLOv8n detector (class-score cosine 0.90, one image in eight decided differently):

- int8 probabilities have a step of 1/256, so every score under 0.002 rounds to zero, and a logit error
  becomes a relative error of the same size on every small probability. The head — the Sigmoid, the data
  movement back to the convs that write its logits, and those convs — stays float (`score_head_nodes`).
- the logit error is mostly made in the stem: the first, full-resolution stages have min/max ranges 3-4×
  wider than the bulk of their values (an int8 step of 0.4-1.5), and the error compounds through the
  network. Where the backend has int16 activations (a16w8, weights stay int8), the activations at stride
  ≤ 4 get them (`stem_activations`). Together: class-score cosine 0.90 → 0.99.

Both are found by graph pattern and shapes, never by node name. Any model's stem can be asked for at int16
(`--int16-stem`, a whole-model pass the `--budget` search tries): where fine early detail decides the outputs
(PP-OCR's recogniser reading text lines, EfficientNet-Lite1's top-1), with no score head.
"""

from __future__ import annotations

from pathlib import Path

MOVES = ("Concat", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Slice", "Split", "Identity")
WRITERS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
STEM_STRIDE = 4  # activations at least 1/STEM_STRIDE of the input's height and width are the stem's


def score_head_nodes(graph) -> list[str]:
    """The nodes of every score head: the Sigmoid, the data movement between it and the nodes writing its
    logits, and those writers (empty when the graph has no score head)."""
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    outputs = {o.name for o in graph.output}

    def reaches_output(tensor: str, seen: set) -> bool:
        if tensor in outputs:
            return True
        for c in consumers.get(tensor, []):
            if c.op_type in MOVES and c.name not in seen:
                seen.add(c.name)
                if any(reaches_output(o, seen) for o in c.output):
                    return True
        return False

    def silu(n) -> bool:
        return any(c.op_type == "Mul" and n.input[0] in c.input for c in consumers.get(n.output[0], []))

    out: list[str] = []
    for head in (n for n in graph.node if n.op_type == "Sigmoid" and not silu(n) and reaches_output(n.output[0], set())):
        out.append(head.name)
        todo = [head.input[0]]
        while todo:
            node = producer.get(todo.pop())
            if node is None or node.name in out:
                continue
            if node.op_type in WRITERS:
                out.append(node.name)
            elif node.op_type in MOVES:
                out.append(node.name)
                todo += [i for i in node.input if i in producer]
    return out


def stem_activations(model: Path, asked: bool = False) -> list[str]:
    """The float 4-D activations of the stem (height and width at least 1/STEM_STRIDE of the first 4-D
    input's, NCHW or NHWC, read from the graph's inferred shapes) of a model with a score head, or of any
    model when `asked` (`--int16-stem`); none else."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    if not asked and not score_head_nodes(graph):
        return []
    def dims(value) -> list[int]:
        return [d.dim_value for d in value.type.tensor_type.shape.dim]

    images = [dims(i) for i in graph.input if len(dims(i)) == 4 and all(d > 0 for d in dims(i))]
    if not images:
        return []
    image = images[0]
    height, width = (image[1], image[2]) if image[3] in (1, 3, 4) and image[1] not in (1, 3, 4) else (image[2], image[3])
    made = {out for node in graph.node for out in node.output}  # value_info may still name tensors no node makes
    return [v.name for v in graph.value_info if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT and v.name in made
            and len(d := dims(v)) == 4 and d[2] * STEM_STRIDE >= height and d[3] * STEM_STRIDE >= width]
