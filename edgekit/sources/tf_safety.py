"""What a TensorFlow model may make TensorFlow do: checked on the model's files before TensorFlow runs any of it.

A SavedModel is a program. `tf.saved_model.load` runs parts of it (resource initializers and the
`__saved_model_init_op`; for a TF1 graph its init and restore ops), and edgekit then calls its
serving function. Both can run any op the graph holds, so a model from a pull request could read
a file from anywhere and write a copy elsewhere while it is merely opened. Before anything is
loaded, `check_saved_model` parses `saved_model.pb` (or `saved_model.pbtxt`, the order the loader
uses) and walks every MetaGraphDef: each node of `graph_def` and of every function in
`graph_def.library` (all of them, reachable or not), including ops named through function-valued
attributes (`f` of `StatefulPartitionedCall`, `then_branch`, dataset `f`s, ...; a name there that is
an op and not a library function runs that op). A node whose op touches the file system, another
process or the network, or calls back into Python refuses the model with `BadInput`, naming the
op, the node and the function. `--trust-model-code` (`trust_model_code=True`) skips the check.

How the op set was derived (TensorFlow 2.21): all 1908 ops of the C++ op registry
(`TF_GetAllOpList`, which also holds the ops `tf.raw_ops` does not show: `_Send`, `RpcServer`, ...)
were filtered by `CANDIDATE_NAME` on the op name and `CANDIDATE_ARG` on its input and attribute
names (filename, prefix, path, url, address, token, memory_region_name, output_stream,
descriptor_source, debug_ops_spec, ...), leaving 262 candidates. The 90 of them with no kernel in
this build (TPU, TPU-embedding and Nccl ops, `XlaCustomCall`, ...) cannot run here; the few of those
that would reach a file or a network elsewhere are in the sets anyway. Each of the other 172 was
read against its op definition and kernel and put in exactly one of the sets below.
`registry_candidates()` repeats the enumeration, and a test fails when a TensorFlow upgrade brings
a candidate that is in none of them.

- `FILE_OPS`: ReadFile, WriteFile, MatchingFiles, FileSystemSetConfiguration, ImmutableConst (maps
  a file named by `memory_region_name`); the reader ops that open files (WholeFileReader,
  TextLineReader, TFRecordReader, FixedLengthRecordReader, LMDBReader, RecordInput); file-based
  datasets (TFRecord, TextLine, FixedLengthRecord, CSV, LMDB, Sql, MatchingFiles, Cache, Snapshot,
  Save/Load, DatasetToTFRecord); checkpoint ops (Save, SaveSlices, SaveV2, Restore, RestoreSlice,
  RestoreV2, MergeV2Checkpoints, DTensorRestoreV2, LoadAndRemapMatrix, GenerateVocabRemapping);
  InitializeTableFromTextFile, Skipgram; summary writers (Create*SummaryWriter, Write*Summary,
  ImportEvent, Flush/Close); DumpTensor, CalibrationStatisticsSaver.
- `PROCESS_OPS`: RPC (RpcServer, RpcServerRegister, RpcServerStart, RpcClient, RpcCall), tf.data
  service (DataServiceDataset*, RegisterDataset*, DistributedSave), RemoteCall, Send/Recv and
  their internal forms, collective and Nccl ops (other devices and workers), WorkerHeartbeat, and
  Abort (ends the process).
- `PYTHON_OPS`: PyFunc, PyFuncStateless, EagerPyFunc.
- `EMBEDDED_GRAPH_OPS`: DatasetFromGraph and MlirPassthroughOp run a graph or an MLIR module
  carried as data, which this scan cannot see into; XlaCustomCall/V2 call whatever native function
  is registered under the name the graph gives (they are in the registry once XLA's ops are loaded).
- `CONDITIONAL`: ops refused only with an attribute that reaches a file or the network: PrintV2
  with a `file://` output stream; DebugIdentity/V2/V3, DebugNanCount and DebugNumericSummary with
  `debug_urls`; Copy/CopyHost with `debug_ops_spec`; DecodeProtoV2/EncodeProto whose
  `descriptor_source` is a file path; FixedUnigramCandidateSampler with a `vocab_file`.
- `REVIEWED_HARMLESS`: the other candidates; they work in memory (summary protos, string
  formatting of file names, reader ops acting on a reader handle whose creation is refused, ...).

Checkpoint exception: a SavedModel carries its own save and restore functions
(`__inference__traced_save_*`, `__inference__traced_restore_*`, reached from the nodes
`saver_def` names; in a TF1 graph the `save/...` nodes themselves). The checkpoint ops in them
(`CHECKPOINT_OPS`) are allowed when they are reached only from those nodes, never from anything
else the model runs, and when their file argument is the checkpoint path the loader passes in
(`saver_def.filename_tensor_name`), extended only by constant suffixes with no `..` component.
The same ops anywhere else, or on another path, are refused.

Keras files are loaded with `safe_mode` (Lambda layers and other arbitrary code refused).
`check_keras_file` also refuses, before Keras runs, a config that would make TensorFlow read outside
the file: a `TFSMLayer` (it loads the SavedModel at its `filepath`) or a lookup layer whose
`vocabulary` is a file path.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import zipfile
from dataclasses import dataclass

from edgekit.core.errors import BadInput

FILE_OPS = frozenset({
    "ReadFile", "WriteFile", "MatchingFiles", "FileSystemSetConfiguration", "ImmutableConst",
    # readers that open the files they are given
    "WholeFileReader", "WholeFileReaderV2", "TextLineReader", "TextLineReaderV2", "TFRecordReader",
    "TFRecordReaderV2", "FixedLengthRecordReader", "FixedLengthRecordReaderV2", "LMDBReader", "RecordInput",
    # datasets that read or write files
    "TFRecordDataset", "TFRecordDatasetV2", "TextLineDataset", "FixedLengthRecordDataset",
    "FixedLengthRecordDatasetV2", "CSVDataset", "CSVDatasetV2", "ExperimentalCSVDataset", "LMDBDataset",
    "ExperimentalLMDBDataset", "SqlDataset", "ExperimentalSqlDataset", "MatchingFilesDataset",
    "ExperimentalMatchingFilesDataset", "CacheDataset", "CacheDatasetV2", "SnapshotDataset", "SnapshotDatasetV2",
    "SnapshotDatasetReader", "SnapshotNestedDatasetReader", "SnapshotChunkDataset", "ListSnapshotChunksDataset",
    "SaveDataset", "SaveDatasetV2", "LoadDataset", "DatasetToTFRecord", "ExperimentalDatasetToTFRecord",
    # checkpoints
    "Save", "SaveSlices", "SaveV2", "Restore", "RestoreSlice", "RestoreV2", "MergeV2Checkpoints",
    "DTensorRestoreV2", "LoadAndRemapMatrix", "GenerateVocabRemapping",
    # files read into tables or samplers
    "InitializeTableFromTextFile", "InitializeTableFromTextFileV2", "Skipgram",
    # summary and dump writers
    "SummaryWriter", "CreateSummaryFileWriter", "CreateSummaryDbWriter", "WriteSummary", "WriteScalarSummary",
    "WriteHistogramSummary", "WriteImageSummary", "WriteAudioSummary", "WriteGraphSummary", "WriteRawProtoSummary",
    "ImportEvent", "FlushSummaryWriter", "CloseSummaryWriter", "DumpTensor", "CalibrationStatisticsSaver",
})

PROCESS_OPS = frozenset({
    "RpcServer", "RpcServerRegister", "RpcServerStart", "RpcClient", "RpcCall",
    "DataServiceDataset", "DataServiceDatasetV2", "DataServiceDatasetV3", "DataServiceDatasetV4",
    "RegisterDataset", "RegisterDatasetV2", "DistributedSave",
    "RemoteCall", "Send", "Recv", "_Send", "_Recv", "_HostSend", "_HostRecv",
    "CollectiveReduce", "CollectiveReduceV2", "CollectiveReduceV3", "CollectiveGather", "CollectiveGatherV2",
    "CollectiveBcastSend", "CollectiveBcastSendV2", "CollectiveBcastRecv", "CollectiveBcastRecvV2",
    "CollectiveAllToAllV2", "CollectiveAllToAllV3", "CollectiveReduceScatterV2", "CollectivePermute",
    "CollectiveInitializeCommunicator", "NcclAllReduce", "NcclReduce", "NcclBroadcast", "_NcclReduceSend",
    "_NcclReduceRecv", "_NcclBroadcastSend", "_NcclBroadcastRecv",
    "WorkerHeartbeat", "Abort",
})

PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})

EMBEDDED_GRAPH_OPS = frozenset({"DatasetFromGraph", "MlirPassthroughOp", "XlaCustomCall", "XlaCustomCallV2"})

KINDS = (("file-system", FILE_OPS), ("process/network", PROCESS_OPS), ("Python-callback", PYTHON_OPS),
         ("embedded-graph", EMBEDDED_GRAPH_OPS))

# checkpoint ops a SavedModel's own save/restore functions use, and which of their inputs are file paths
CHECKPOINT_OPS = {"SaveV2": (0,), "RestoreV2": (0,), "MergeV2Checkpoints": (0, 1), "Save": (0,),
                  "SaveSlices": (0,), "Restore": (0,), "RestoreSlice": (0,)}

_CONSOLE_STREAMS = {"stderr", "stdout", "log(info)", "log(warning)", "log(error)"}


def _attr_str(attrs, key: str) -> str:
    return attrs[key].s.decode("utf-8", "replace") if key in attrs else ""


def _attr_strs(attrs, key: str) -> list[str]:
    return [s.decode("utf-8", "replace") for s in attrs[key].list.s] if key in attrs else []


def _print_v2(attrs):
    stream = _attr_str(attrs, "output_stream") or "stderr"
    return None if stream in _CONSOLE_STREAMS else ("file-system", f"output_stream {stream!r}")


def _debug_urls(attrs):
    urls = _attr_strs(attrs, "debug_urls")
    return ("file-system", f"debug_urls {urls}") if urls else None


def _debug_ops_spec(attrs):
    spec = _attr_strs(attrs, "debug_ops_spec")
    return ("file-system", f"debug_ops_spec {spec}") if spec else None


def _descriptor_source(attrs):
    source = _attr_str(attrs, "descriptor_source") or "local://"
    return None if source == "local://" or source.startswith("bytes://") else \
        ("file-system", f"descriptor_source {source!r}")


def _vocab_file(attrs):
    path = _attr_str(attrs, "vocab_file")
    return ("file-system", f"vocab_file {path!r}") if path else None


# op → check of its attributes: (kind, detail) when this use reaches a file or the network
CONDITIONAL = {
    "PrintV2": _print_v2,
    "DebugIdentity": _debug_urls, "DebugIdentityV2": _debug_urls, "DebugIdentityV3": _debug_urls,
    "DebugNanCount": _debug_urls, "DebugNumericSummary": _debug_urls,
    "Copy": _debug_ops_spec, "CopyHost": _debug_ops_spec,
    "DecodeProtoV2": _descriptor_source, "EncodeProto": _descriptor_source,
    "FixedUnigramCandidateSampler": _vocab_file,
}

# Registry candidates read and found to touch no file, process or Python (see the module docstring).
REVIEWED_HARMLESS = frozenset({
    # summaries built as protos in memory (only the Write*/Create* writer ops touch files)
    "AudioSummary", "AudioSummaryV2", "HistogramSummary", "ImageSummary", "MergeSummary", "ScalarSummary",
    "TensorSummary", "TensorSummaryV2", "StatsAggregatorSummary", "ExperimentalStatsAggregatorSummary",
    "StatsAggregatorSetSummaryWriter", "SetStatsAggregatorDataset", "ExperimentalSetStatsAggregatorDataset",
    # in-memory caches, tensors and debugging values that stay in the graph
    "AnonymousMemoryCache", "DeleteMemoryCache", "DummyMemoryCache", "Snapshot", "HostConst", "_HostCast",
    "DebugGradientIdentity", "DebugGradientRefIdentity", "DebugNumericSummaryV2", "Print",
    # reader ops on a reader handle (the readers that open files are refused where they are created)
    "IdentityReader", "IdentityReaderV2", "ReaderNumRecordsProduced", "ReaderNumRecordsProducedV2",
    "ReaderNumWorkUnitsCompleted", "ReaderNumWorkUnitsCompletedV2", "ReaderRead", "ReaderReadUpTo",
    "ReaderReadUpToV2", "ReaderReadV2", "ReaderReset", "ReaderResetV2", "ReaderRestoreState",
    "ReaderRestoreStateV2", "ReaderSerializeState", "ReaderSerializeStateV2",
    # RPC results on a future that only the refused RpcCall makes
    "RpcCheckStatus", "RpcGetValue", "DeleteRpcFutureResource",
    # string formatting of names, parsing, arithmetic
    "ShardedFilename", "ShardedFilespec", "DecodeCSV", "TensorSliceDataset", "CollectiveAssignGroupV2",
    "ApproxTopK", "CTCBeamSearchDecoder", "InTopK", "InTopKV2", "NegTrain",
    # XLA: a StableHLO module (its TF calls are functions, scanned) and channels inside one computation
    "XlaCallModule", "XlaSend", "XlaRecv",
})

# The enumeration that produced the sets above (see registry_candidates).
CANDIDATE_NAME = re.compile(
    r"File|Reader|Writer|Record|Save|Restore|Checkpoint|Summary|Event|Rpc|PyFunc|Debug|Snapshot|Remote|Send|Recv|"
    r"Service|Collective|Nccl|Abort|Heartbeat|FromGraph|Mlir|Print|Dump|Sql|LMDB|CSV|Cache|Immutable|Load|"
    r"Matching|Vocab|Skipgram|Calibration|Distributed|Register|Host|Server|Client")
CANDIDATE_ARG = re.compile(
    r"file|path|prefix|dir(?!ection)|url|uri|address|server|target|stream|region|token|descriptor|debug_ops|"
    r"data_source|driver|protocol|vocab|log_?dir|shard_dir|chunk", re.I)


def classification(op: str) -> str | None:
    """Which set of this module `op` is in, if any."""
    for kind, ops in KINDS:
        if op in ops:
            return kind
    if op in CONDITIONAL:
        return "conditional"
    if op in REVIEWED_HARMLESS:
        return "harmless"
    return None


def registry_candidates() -> dict[str, str]:
    """Every op of the installed TensorFlow's registry that has a kernel and matches the candidate
    patterns, with what matched: the list this module's sets were read from."""
    import tensorflow  # noqa: F401  (registers the ops)
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session
    from tensorflow.python.framework import kernels

    op_list = op_def_pb2.OpList()
    op_list.ParseFromString(pywrap_tf_session.TF_GetBuffer(pywrap_tf_session.TF_GetAllOpList()))
    out = {}
    for op in op_list.op:
        args = [a.name for a in op.input_arg] + [a.name for a in op.attr]
        why = (["name"] if CANDIDATE_NAME.search(op.name) else []) + [a for a in args if CANDIDATE_ARG.search(a)]
        if why and kernels.get_registered_kernels_for_op(op.name).kernel:
            out[op.name] = ", ".join(why)
    return out


# --- the SavedModel scan -------------------------------------------------------------------------

@dataclass(frozen=True)
class Finding:
    """One op the model would run that touches a file, another process or Python."""

    kind: str
    op: str
    node: str
    function: str | None  # None: a node of the MetaGraphDef's own graph
    via: str | None = None  # the function-valued attribute that names the op
    detail: str | None = None

    def describe(self) -> str:
        """The finding in a refusal's message: kind, op and where it sits (which attribute names it, if one)."""
        where = f"node '{self.node}' of " + (f"function '{self.function}'" if self.function else "the graph")
        via = f"named by attribute '{self.via}' of " if self.via else ""
        detail = f", {self.detail}" if self.detail else ""
        return f"{self.kind} op {self.op} ({via}{where}{detail})"


def check_saved_model(location: str) -> None:
    """Raise BadInput when the SavedModel at `location` holds an op of the sets above."""
    findings = scan_saved_model(location)
    if not findings:
        return
    first, rest = findings[0], findings[1:]
    more = ""
    if rest:
        names = sorted({f.op for f in rest})
        more = f"; {len(rest)} more ({', '.join(names[:6])}{', ...' if len(names) > 6 else ''})"
    raise BadInput(f"{location} would make TensorFlow run {first.describe()} when loaded or called{more}",
                   fix="pass --trust-model-code if you trust the model's author (TensorFlow then runs these ops)")


def scan_saved_model(location: str) -> list[Finding]:
    """The Findings of every MetaGraphDef of the SavedModel at `location` (nothing of it is run)."""
    saved_model = _parse(location)
    findings: list[Finding] = []
    for meta_graph in saved_model.meta_graphs:
        findings.extend(scan_meta_graph(meta_graph))
    return findings


def _parse(location: str):
    from google.protobuf import message, text_format
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    path = os.path.join(location, "saved_model.pb")
    if not os.path.exists(path):  # the loader's order: .pb first, then .pbtxt
        path = os.path.join(location, "saved_model.pbtxt")
    try:
        if path.endswith(".pb"):
            with open(path, "rb") as f:
                saved_model.ParseFromString(f.read())
        else:
            with open(path, encoding="utf-8") as f:
                text_format.Parse(f.read(), saved_model)
    except (OSError, UnicodeDecodeError, message.DecodeError, text_format.ParseError) as e:
        reason = (str(e).strip().splitlines() or [""])[0]
        raise BadInput(f"{location} is not a readable SavedModel: {os.path.basename(path)} cannot be parsed "
                       f"({type(e).__name__}{': ' + reason if reason else ''})",
                       fix="re-export it (tf.saved_model.save or keras model.export) and copy the whole folder") from None
    return saved_model


def _node_name(ref: str) -> str:
    """'^name', 'name:0', 'name:out:0' → 'name'."""
    return ref.lstrip("^").split(":", 1)[0]


def _data_inputs(node) -> list[str]:
    return [i for i in node.input if not i.startswith("^")]


def _func_refs(attrs, path: str = ""):
    """(attribute path, NameAttrList) for every function-valued attribute, nested ones included."""
    for key in sorted(attrs):
        value = attrs[key]
        where = f"{path}.{key}" if path else key
        funcs = [value.func] if value.HasField("func") else list(value.list.func)
        for func in funcs:
            yield where, func
            yield from _func_refs(func.attr, where)


def _strings(msg, out: set[str], skip: tuple[str, ...] = ()) -> None:
    """Every string field anywhere in a proto message (map keys included), but the fields `skip`."""
    for field, value in msg.ListFields():
        if field.name in skip:
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            for k, v in value.items():
                if isinstance(k, str):
                    out.add(k)
                if hasattr(v, "ListFields"):
                    _strings(v, out)
                elif isinstance(v, str):
                    out.add(v)
        elif field.type == field.TYPE_MESSAGE:
            for item in (value if _repeated(field) else [value]):
                _strings(item, out)
        elif field.type == field.TYPE_STRING:
            out.update(value if _repeated(field) else [value])


def _repeated(field) -> bool:
    flag = getattr(field, "is_repeated", None)  # protobuf >= 5; older ones have only `label`
    return bool(flag) if flag is not None else field.label == field.LABEL_REPEATED


def _op_finding(op: str, attrs, node: str, function: str | None, via: str | None = None) -> Finding | None:
    for kind, ops in KINDS:
        if op in ops:
            return Finding(kind, op, node, function, via)
    check = CONDITIONAL.get(op)
    hit = check(attrs) if check else None
    return Finding(hit[0], op, node, function, via, hit[1]) if hit else None


class _Context:
    """The nodes of the graph or of one function, for following file-path inputs back.

    Each node is judged once (memoized, cycles and chains deeper than _DEPTH count as "no"), so a
    crafted graph cannot make the scan slow.
    """

    def __init__(self, nodes, function=None, path_args: frozenset[int] = frozenset(), filename_node: str | None = None):
        self.nodes = {n.name: n for n in nodes}
        self.function = function
        self.args = [a.name for a in function.signature.input_arg] if function is not None else []
        self.path_args = path_args
        self.filename_node = filename_node
        self._paths: dict[str, bool] = {}
        self._values: dict[str, list[str] | None] = {}

    def is_checkpoint_path(self, ref: str, depth: int = 0) -> bool:
        """Whether tensor `ref` is the checkpoint path the loader passes, plus safe constant suffixes."""
        name = _node_name(ref)
        if self.function is not None and name in self.args and ":" not in ref:
            return self.args.index(name) in self.path_args
        if self.function is None and name == self.filename_node:
            return True
        if name not in self._paths:
            self._paths[name] = False  # a cycle back here is "no"
            self._paths[name] = depth < _DEPTH and self._judge_path(self.nodes.get(name), depth)
        return self._paths[name]

    def _judge_path(self, node, depth: int) -> bool:
        if node is None:
            return False
        ins = _data_inputs(node)
        if node.op in ("Identity", "ShardedFilename", "ShardedFilespec") and ins:
            return self.is_checkpoint_path(ins[0], depth + 1)
        if node.op == "Pack":
            return bool(ins) and all(self.is_checkpoint_path(i, depth + 1) for i in ins)
        if node.op == "StringJoin" and ins and self.is_checkpoint_path(ins[0], depth + 1):
            separator = _attr_str(node.attr, "separator")
            options = [self._constant_strings(i, depth + 1) for i in ins[1:]]
            if any(o is None for o in options) or _product_size(options) > _MAX_STRINGS:
                return False
            # every way the suffixes can come out must stay below the checkpoint path
            return not any(".." in ("x" + "".join(separator + p for p in parts)).replace("\\", "/").split("/")
                           for parts in itertools.product(*options))
        return False

    def _constant_strings(self, ref: str, depth: int) -> list[str] | None:
        """The strings tensor `ref` can take when it is built from constants only, else None."""
        name = _node_name(ref)
        if name not in self._values:
            self._values[name] = None
            node = self.nodes.get(name)
            self._values[name] = self._judge_values(node, depth) if node is not None and depth < _DEPTH else None
        return self._values[name]

    def _judge_values(self, node, depth: int) -> list[str] | None:
        ins = _data_inputs(node)
        if node.op == "Const":
            values = [v.decode("utf-8", "replace") for v in node.attr["value"].tensor.string_val]
            return values if 0 < len(values) <= _MAX_STRINGS else None
        if node.op == "Identity" and ins:
            return self._constant_strings(ins[0], depth + 1)
        if node.op in ("Select", "SelectV2") and len(ins) == 3:
            a, b = self._constant_strings(ins[1], depth + 1), self._constant_strings(ins[2], depth + 1)
            return None if a is None or b is None or len(a) + len(b) > _MAX_STRINGS else a + b
        return None


_DEPTH = 64
_MAX_STRINGS = 256


def _product_size(options: list[list[str]]) -> int:
    size = 1
    for o in options:
        size *= len(o)
        if size > _MAX_STRINGS:
            break
    return size


def scan_meta_graph(meta_graph) -> list[Finding]:
    """The Findings of one MetaGraphDef: its graph and every function of its library."""
    graph = meta_graph.graph_def
    library = {f.signature.name: f for f in graph.library.function}

    def calls(node):
        """(callee function name, maps inputs to arguments) of one node."""
        out = []
        if node.op in library:
            out.append((node.op, True))
        for key, func in _func_refs(node.attr):
            if func.name in library:
                positional = key == "f" and node.op in ("PartitionedCall", "StatefulPartitionedCall")
                out.append((func.name, positional))
        return out

    # The save/restore region of the graph: what the saver_def nodes depend on and nothing else runs.
    by_name = {n.name: n for n in graph.node}
    saver = meta_graph.saver_def
    saver_roots = {_node_name(r) for r in (saver.save_tensor_name, saver.restore_op_name) if r} & set(by_name)
    saver_nodes = _closure(saver_roots, by_name)
    other_roots = {n.name for n in graph.node if n.name not in saver_nodes}
    referenced: set[str] = set()  # names in signatures, collections, the object graph, ...
    _strings(meta_graph, referenced, skip=("graph_def", "saver_def"))
    other_roots |= {_node_name(s) for s in referenced if _node_name(s) in by_name}
    general_nodes = _closure(other_roots, by_name)
    saver_only = saver_nodes - general_nodes

    # Functions reached only from the saver-only nodes (and from each other).
    saver_fns = _fn_closure({f for n in saver_only for f, _ in calls(by_name[n])}, library, calls)
    fn_refs: set[str] = set()
    for f in library.values():
        _strings_of_attrs(f.attr, fn_refs)
    for g in graph.library.gradient:
        fn_refs.update((g.function_name, g.gradient_func))
    general_roots = ({f for n in graph.node if n.name not in saver_only for f, _ in calls(n)}
                     | (set(library) - saver_fns) | ((referenced | fn_refs) & set(library)))
    general_fns = _fn_closure(general_roots, library, calls)
    saver_only_fns = saver_fns - general_fns

    path_args = _path_args(graph, library, saver_only, saver_only_fns, calls,
                           _node_name(saver.filename_tensor_name) if saver.filename_tensor_name else None)

    findings: list[Finding] = []
    top = _Context(graph.node, filename_node=_node_name(saver.filename_tensor_name) or None)
    findings += _scan_nodes(graph.node, None, top, saver_only, library)
    for name in sorted(library):
        fn = library[name]
        ctx = _Context(fn.node_def, fn, path_args.get(name, frozenset()))
        allowed = {n.name for n in fn.node_def} if name in saver_only_fns else set()
        findings += _scan_nodes(fn.node_def, name, ctx, allowed, library)
    return findings


def _strings_of_attrs(attrs, out: set[str]) -> None:
    for value in attrs.values():
        _strings(value, out)


def _closure(roots: set[str], by_name: dict) -> set[str]:
    """`roots` and every graph node they depend on (data and control inputs)."""
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        todo.extend(_node_name(i) for i in by_name[name].input)
    return seen


def _fn_closure(roots: set[str], library: dict, calls) -> set[str]:
    seen, todo = set(), [r for r in roots if r in library]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(f for n in library[name].node_def for f, _ in calls(n) if f not in seen)
    return seen


def _path_args(graph, library, saver_only: set[str], saver_only_fns: set[str], calls, filename_node):
    """For each saver-only function, the argument positions every caller fills with the checkpoint path."""
    result = {name: frozenset(range(len(library[name].signature.input_arg))) for name in saver_only_fns}
    for _ in range(len(saver_only_fns) + 1):  # shrinks to a fixed point
        found: dict[str, frozenset[int]] = {}

        def visit(nodes, ctx):
            for node in nodes:
                for callee, positional in calls(node):
                    if callee not in result:
                        continue
                    ins = _data_inputs(node)
                    mine = frozenset(i for i, ref in enumerate(ins) if positional and ctx.is_checkpoint_path(ref))
                    found[callee] = found.get(callee, mine) & mine

        visit([n for n in graph.node if n.name in saver_only], _Context(graph.node, filename_node=filename_node))
        for name in saver_only_fns:
            fn = library[name]
            visit(fn.node_def, _Context(fn.node_def, fn, result[name]))
        new = {name: found.get(name, frozenset()) & result[name] for name in result}
        if new == result:
            break
        result = new
    return result


def _scan_nodes(nodes, function: str | None, ctx: _Context, checkpoint_allowed: set[str], library) -> list[Finding]:
    out = []
    for node in nodes:
        if node.op in CHECKPOINT_OPS and node.name in checkpoint_allowed:
            ins = _data_inputs(node)
            if all(i < len(ins) and ctx.is_checkpoint_path(ins[i]) for i in CHECKPOINT_OPS[node.op]):
                continue
            out.append(Finding("file-system", node.op, node.name, function,
                               detail="on a path other than the checkpoint the loader restores"))
            continue
        hit = _op_finding(node.op, node.attr, node.name, function)
        if hit:
            out.append(hit)
        for key, func in _func_refs(node.attr):
            if func.name not in library:
                hit = _op_finding(func.name, func.attr, node.name, function, via=key)
                if hit:
                    out.append(hit)
    return out


# --- Keras files ---------------------------------------------------------------------------------

def check_keras_file(location: str) -> None:
    """Raise BadInput when a .keras/.h5 config would make TensorFlow read outside the file on load."""
    config = _keras_config(location)
    if config is None:
        return  # unreadable here: Keras reports it
    for layer in _configs(config):
        names = {str(layer.get("class_name") or ""), str(layer.get("registered_name") or "")}
        inner = layer.get("config") if isinstance(layer.get("config"), dict) else {}
        label = inner.get("name") or layer.get("name") or layer.get("class_name")
        if any(n.split(">")[-1].endswith("TFSMLayer") for n in names):
            raise BadInput(f"{location}: layer '{label}' is a TFSMLayer, which loads the SavedModel at "
                           f"{inner.get('filepath')!r} from outside the Keras file when the model is opened",
                           fix="convert that SavedModel directory itself (edgekit checks its graph before loading it)")
        if isinstance(inner.get("vocabulary"), str):
            raise BadInput(f"{location}: layer '{label}' reads its vocabulary from the file "
                           f"{inner['vocabulary']!r} outside the Keras file when the model is opened",
                           fix="save the model with the vocabulary inside it (pass the vocabulary as a list)")


def _keras_config(location: str):
    try:
        if zipfile.is_zipfile(location):
            with zipfile.ZipFile(location) as archive:
                return json.loads(archive.read("config.json"))
        import h5py

        with h5py.File(location, "r") as f:
            raw = f.attrs.get("model_config")
        if raw is None:
            return None
        return json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
    except Exception:  # noqa: BLE001 - a damaged file is for Keras to report
        return None


def _configs(value):
    """Every dict in a JSON tree."""
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            yield item
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
