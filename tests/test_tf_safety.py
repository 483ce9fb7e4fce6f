"""A TensorFlow model runs no file-system, process or Python-callback op unless the user opts in."""

from __future__ import annotations

import json
import zipfile

import pytest

from edgekit.core.errors import EXIT_BAD_INPUT, BadInput
from tests.conftest import KERAS, KERAS_EVAL, run_cli

STRING = 7  # DT_STRING


# --- hand-built MetaGraphDefs: the scan itself, nothing is run ----------------------------------

@pytest.fixture(scope="module", autouse=True)
def tensorflow_protos():
    """TensorFlow's proto classes, imported once (the import, not the scan, takes seconds)."""
    from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2

    return meta_graph_pb2, saved_model_pb2


def meta_graph():
    from tensorflow.core.protobuf import meta_graph_pb2

    return meta_graph_pb2.MetaGraphDef()


def add(nodes, name, op, inputs=(), *, func=None, attrs=None, lists=None, const=None):
    node = nodes.add()
    node.name, node.op = name, op
    node.input.extend(inputs)
    if func:
        node.attr["f"].func.name = func
    for key, value in (attrs or {}).items():
        node.attr[key].s = value.encode()
    for key, values in (lists or {}).items():
        node.attr[key].list.s.extend(v.encode() for v in values)
    if const is not None:
        node.attr["dtype"].type = STRING
        node.attr["value"].tensor.dtype = STRING
        node.attr["value"].tensor.string_val.extend(c.encode() for c in ([const] if isinstance(const, str) else const))
    return node


def function(mg, name, args=()):
    fn = mg.graph_def.library.function.add()
    fn.signature.name = name
    for arg in args:
        fn.signature.input_arg.add(name=arg, type=STRING)
    return fn


def ops(findings):
    return sorted((f.op, f.node, f.function) for f in findings)


def scan(mg):
    from edgekit.sources.tf_safety import scan_meta_graph

    return scan_meta_graph(mg)


def test_file_ops_in_the_graph_and_in_unreached_functions_are_found():
    mg = meta_graph()
    add(mg.graph_def.node, "path", "Const", const="/etc/hostname")
    add(mg.graph_def.node, "read", "ReadFile", ["path"])
    add(mg.graph_def.node, "write", "WriteFile", ["path", "read"])
    fn = function(mg, "__inference_unused_3")
    add(fn.node_def, "py", "PyFunc", attrs={"token": "pyfunc_0"})
    add(fn.node_def, "rpc", "RpcServer")
    found = scan(mg)
    assert ops(found) == [("PyFunc", "py", "__inference_unused_3"), ("ReadFile", "read", None),
                          ("RpcServer", "rpc", "__inference_unused_3"), ("WriteFile", "write", None)]
    assert {f.kind for f in found} == {"file-system", "Python-callback", "process/network"}


def test_ops_named_by_function_attributes_are_found():
    mg = meta_graph()
    add(mg.graph_def.node, "call", "StatefulPartitionedCall", func="WriteFile")  # an op, not a function
    cond = add(mg.graph_def.node, "if", "If")
    cond.attr["then_branch"].func.name = "__inference_then_5"
    fn = function(mg, "__inference_then_5")
    add(fn.node_def, "eager", "EagerPyFunc")
    found = scan(mg)
    assert ops(found) == [("EagerPyFunc", "eager", "__inference_then_5"), ("WriteFile", "call", None)]
    assert next(f for f in found if f.op == "WriteFile").via == "f"


@pytest.mark.parametrize("op, attrs, lists, refused", [
    ("PrintV2", {"output_stream": "stderr"}, {}, False),
    ("PrintV2", {"output_stream": "file:///tmp/out.txt"}, {}, True),
    ("DecodeProtoV2", {"descriptor_source": "local://"}, {}, False),
    ("DecodeProtoV2", {"descriptor_source": "bytes://\n\x00"}, {}, False),
    ("DecodeProtoV2", {"descriptor_source": "/etc/descriptors.pb"}, {}, True),
    ("DebugIdentity", {}, {}, False),
    ("DebugIdentity", {}, {"debug_urls": ["file:///tmp/dump"]}, True),
    ("Copy", {}, {"debug_ops_spec": ["DebugIdentity;grpc://host:6064;0"]}, True),
    ("FixedUnigramCandidateSampler", {"vocab_file": "/etc/passwd"}, {}, True),
])
def test_ops_refused_only_with_an_attribute_that_reaches_a_file(op, attrs, lists, refused):
    mg = meta_graph()
    add(mg.graph_def.node, "n", op, attrs=attrs, lists=lists)
    assert bool(scan(mg)) == refused


def saver_model(restore_body, *, also_called_by_serving=False):
    """The layout tf.saved_model.save writes: saver_def names a call of __inference__traced_restore."""
    mg = meta_graph()
    g = mg.graph_def.node
    add(g, "saver_filename", "Placeholder")
    add(g, "Variable", "VarHandleOp")
    add(g, "StatefulPartitionedCall_3", "StatefulPartitionedCall", ["saver_filename", "Variable"],
        func="__inference__traced_restore_9")
    mg.saver_def.filename_tensor_name = "saver_filename:0"
    mg.saver_def.restore_op_name = "StatefulPartitionedCall_3"
    if also_called_by_serving:
        add(g, "serving_default_x", "Placeholder")
        add(g, "StatefulPartitionedCall", "StatefulPartitionedCall", ["serving_default_x", "Variable"],
            func="__inference__traced_restore_9")
        mg.signature_def["serving_default"].outputs["y"].name = "StatefulPartitionedCall:0"
    fn = function(mg, "__inference__traced_restore_9", ["file_prefix", "variable"])
    restore_body(fn.node_def)
    return mg


def restore(nodes, prefix="file_prefix"):
    add(nodes, "RestoreV2/tensor_names", "Const", const=["w/.ATTRIBUTES/VARIABLE_VALUE"])
    add(nodes, "RestoreV2/shape_and_slices", "Const", const=[""])
    add(nodes, "RestoreV2", "RestoreV2", [prefix, "RestoreV2/tensor_names:output:0", "RestoreV2/shape_and_slices:output:0"])


def save_as_tf_does(nodes):
    """The nodes of a __inference__traced_save function: a temporary shard, then a merge."""
    add(nodes, "StaticRegexFullMatch", "StaticRegexFullMatch", ["file_prefix"], attrs={"pattern": "^s3://.*"})
    add(nodes, "Const", "Const", const=".part")
    add(nodes, "Const_1", "Const", const="_temp/part")
    add(nodes, "Select", "Select", ["StaticRegexFullMatch:output:0", "Const:output:0", "Const_1:output:0"])
    add(nodes, "StringJoin", "StringJoin", ["file_prefix", "Select:output:0"])
    add(nodes, "ShardedFilename", "ShardedFilename", ["StringJoin:output:0", "shard", "num_shards"])
    add(nodes, "names", "Const", const=["w"])
    add(nodes, "SaveV2", "SaveV2", ["ShardedFilename:filename:0", "names:output:0", "names:output:0", "variable"])
    add(nodes, "prefixes", "Pack", ["ShardedFilename:filename:0", "^SaveV2"])
    add(nodes, "MergeV2Checkpoints", "MergeV2Checkpoints", ["prefixes:output:0", "file_prefix"])


def elsewhere(nodes):
    add(nodes, "path", "Const", const="/etc/other_model/variables")
    restore(nodes, prefix="path:output:0")


def climbing_out(nodes):
    add(nodes, "up", "Const", const="/../../../../tmp/x")
    add(nodes, "StringJoin", "StringJoin", ["file_prefix", "up:output:0"])
    restore(nodes, prefix="StringJoin:output:0")


def restore_and_read(nodes):
    restore(nodes)
    add(nodes, "ReadFile", "ReadFile", ["file_prefix"])


@pytest.mark.parametrize("body, expected", [
    (restore, []),
    (save_as_tf_does, []),
    (elsewhere, [("RestoreV2", "RestoreV2", "__inference__traced_restore_9")]),
    (climbing_out, [("RestoreV2", "RestoreV2", "__inference__traced_restore_9")]),
    (restore_and_read, [("ReadFile", "ReadFile", "__inference__traced_restore_9")]),
])
def test_checkpoint_ops_pass_only_in_the_savers_own_functions_on_the_checkpoint_path(body, expected):
    assert ops(scan(saver_model(body))) == expected


def test_checkpoint_ops_in_a_function_the_serving_graph_also_calls_are_refused():
    found = scan(saver_model(restore, also_called_by_serving=True))
    assert ops(found) == [("RestoreV2", "RestoreV2", "__inference__traced_restore_9")]


def test_a_crafted_path_graph_cannot_make_the_scan_slow():
    def deep(nodes):  # 40 levels of Pack, each taking the level below 10 times: 10**40 paths unmemoized
        below = "file_prefix"
        for level in range(40):
            add(nodes, f"pack_{level}", "Pack", [below] * 10)
            below = f"pack_{level}:output:0"
        add(nodes, "up", "Const", const=["/x", "/.."] * 200)
        add(nodes, "join", "StringJoin", [below, "up:output:0", "up:output:0"])
        restore(nodes, prefix="join:output:0")

    assert ops(scan(saver_model(deep))) == [("RestoreV2", "RestoreV2", "__inference__traced_restore_9")]


def test_check_saved_model_names_op_node_function_and_fix(tmp_path):
    from tensorflow.core.protobuf import saved_model_pb2

    from edgekit.sources.tf_safety import check_saved_model

    sm = saved_model_pb2.SavedModel()
    mg = sm.meta_graphs.add()
    fn = function(mg, "__inference__initializer_30")
    add(fn.node_def, "ReadFile", "ReadFile", ["path"])
    add(fn.node_def, "WriteFile", "WriteFile", ["dest", "ReadFile:contents:0"])
    (tmp_path / "saved_model.pb").write_bytes(sm.SerializeToString())
    with pytest.raises(BadInput) as e:
        check_saved_model(str(tmp_path))
    text = str(e.value)
    assert e.value.exit_code == EXIT_BAD_INPUT and "\n" not in text
    assert "ReadFile" in text and "node 'ReadFile'" in text and "'__inference__initializer_30'" in text
    assert "WriteFile" in text and "--trust-model-code" in text

    (tmp_path / "saved_model.pb").write_bytes(b"\x0a\xff\xff garbage")
    with pytest.raises(BadInput, match="cannot be parsed"):
        check_saved_model(str(tmp_path))


def test_every_candidate_op_of_the_registry_is_classified():
    """The sets were read from this enumeration; a TensorFlow upgrade that adds a candidate fails here."""
    from edgekit.sources.tf_safety import classification, registry_candidates

    candidates = registry_candidates()
    assert {"ReadFile", "WriteFile", "PyFunc", "RpcServer", "SaveV2", "ImmutableConst"} <= set(candidates)
    unclassified = {op: why for op, why in candidates.items() if classification(op) is None}
    assert not unclassified, f"classify these ops in edgekit/tf_safety.py: {unclassified}"


# --- Keras configs -------------------------------------------------------------------------------

def keras_archive(path, layer):
    config = {"module": "keras.src.models.functional", "class_name": "Functional", "config": {"name": "m", "layers": [
        {"module": "keras.layers", "class_name": "InputLayer", "config": {"batch_shape": [1, 4], "name": "x"}},
        layer]}, "registered_name": "Functional"}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
        z.writestr("config.json", json.dumps(config))
        z.writestr("model.weights.h5", b"")
    return path


@pytest.mark.parametrize("layer, words", [
    ({"module": "keras.layers", "class_name": "TFSMLayer", "registered_name": None,
      "config": {"name": "tfsm_layer", "filepath": "/somewhere/saved_model", "call_endpoint": "serving_default"}},
     ["TFSMLayer", "/somewhere/saved_model", "convert that SavedModel directory"]),
    ({"module": "keras.layers", "class_name": "StringLookup",
      "config": {"name": "lookup", "vocabulary": "/etc/passwd"}},
     ["'lookup'", "/etc/passwd"]),
])
def test_keras_config_that_loads_files_from_outside_is_refused_before_keras_runs(tmp_path, layer, words):
    from edgekit.sources.loading import open_source

    with pytest.raises(BadInput) as e:
        open_source(str(keras_archive(tmp_path / "m.keras", layer)))
    assert all(w in str(e.value) for w in words), str(e.value)


def test_sample_keras_model_passes_the_config_check():
    from edgekit.sources.tf_safety import check_keras_file

    check_keras_file(str(KERAS))


# --- real SavedModels through the command line ---------------------------------------------------

def build_payload_models(root, canary, copy_at_load, copy_when_called):
    """Two SavedModels that copy `canary` elsewhere: one while it is loaded, one when it is called."""
    import tensorflow as tf

    class CopyAtLoad(tf.saved_model.experimental.TrackableResource):
        def _create_resource(self):
            return tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[], shared_name="copy_at_load")

        def _initialize(self):  # runs inside tf.saved_model.load
            tf.io.write_file(str(copy_at_load), tf.io.read_file(str(canary)))

    class Model(tf.Module):
        def __init__(self, payload_in_call):
            super().__init__()
            self.w = tf.Variable(2.0)
            self.payload_in_call = payload_in_call
            if not payload_in_call:
                self.copier = CopyAtLoad()

        @tf.function(input_signature=[tf.TensorSpec((1, 4), tf.float32, name="x")])
        def serve(self, x):
            if self.payload_in_call:
                tf.io.write_file(str(copy_when_called), tf.io.read_file(str(canary)))
            return {"y": x * self.w}

    for name, in_call in (("copies_at_load", False), ("copies_when_called", True)):
        model = Model(in_call)
        tf.saved_model.save(model, str(root / name), signatures={"serving_default": model.serve})
    return root / "copies_at_load", root / "copies_when_called"


@pytest.fixture(scope="module")
def payloads(tmp_path_factory):
    root = tmp_path_factory.mktemp("payload")
    outside = root / "outside"
    outside.mkdir()
    canary = outside / "canary.txt"
    canary.write_text("canary 7f3a\n")
    copies = root / "copy_at_load.txt", root / "copy_when_called.txt"
    models = build_payload_models(root, canary, *copies)
    assert not any(c.exists() for c in copies)  # building them ran no payload
    return root, models, copies


@pytest.mark.slow
def test_savedmodel_copying_a_file_at_load_is_refused_unless_trusted(payloads):
    root, (at_load, _), (copy, _) = payloads
    r = run_cli("convert", at_load, "-t", "onnx", "-o", root / "out_refused")
    assert r.returncode == EXIT_BAD_INPUT, r.stderr
    assert "ReadFile" in r.stderr and "WriteFile" in r.stderr and "__inference__initializer" in r.stderr
    assert "--trust-model-code" in r.stderr
    assert not copy.exists() and not (root / "out_refused").exists()

    r = run_cli("convert", at_load, "-t", "onnx", "-o", root / "out_trusted", "--trust-model-code")
    assert r.returncode == 0, r.stderr
    assert copy.read_text() == "canary 7f3a\n"  # the payload is real: trusted, TensorFlow ran it


@pytest.mark.slow
def test_savedmodel_copying_a_file_when_called_is_refused(payloads):
    root, (_, when_called), (_, copy) = payloads
    r = run_cli("convert", when_called, "-t", "onnx", "-o", root / "out_called")
    assert r.returncode == EXIT_BAD_INPUT, r.stderr
    assert "WriteFile" in r.stderr and "__inference_serve" in r.stderr
    assert not copy.exists()


@pytest.mark.slow
def test_clean_savedmodels_still_load_and_convert(tmp_path):
    import keras
    import tensorflow as tf

    from edgekit.sources.tf_safety import scan_saved_model

    class Small(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.ones((4, 2)))

        @tf.function(input_signature=[tf.TensorSpec((1, 4), tf.float32, name="x")])
        def serve(self, x):
            return {"y": tf.matmul(x, self.w)}

    small = Small()
    tf.saved_model.save(small, str(tmp_path / "small"), signatures={"serving_default": small.serve})
    assert scan_saved_model(str(tmp_path / "small")) == []  # its save/restore functions hold SaveV2, RestoreV2

    exported = tmp_path / "digits_savedmodel"
    keras.models.load_model(KERAS, compile=False).export(
        str(exported), verbose=False, input_signature=[tf.TensorSpec((1, 8, 8, 1), tf.float32, name="x")])
    r = run_cli("convert", exported, "-t", "onnx", "-o", tmp_path / "out", "--eval", KERAS_EVAL, "--json")
    assert r.returncode == 0, r.stderr
    (onnx,) = json.loads(r.stdout)["artifacts"]
    assert onnx["route"] == ["tf-savedmodel", "onnx"] and onnx["precision"] == "fp32"
    assert onnx["verification"]["status"] == "pass"
