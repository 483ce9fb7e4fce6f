"""Reading an ExportedProgram archive (.pt2) without running code of its author.

`torch.export.load` takes no option to load an archive safely. It unpickles pickled weights and
tensor constants with `torch.load(weights_only=False)`, opaque constants with `pickle.loads`,
TorchScript objects with the TorchScript unpickler, and the sample inputs (and the legacy weight and
constant files) with `weights_only=True` but falling back to `weights_only=False` when that refuses
them; it also loads AOTInductor libraries packed in the archive. The public switch
TORCH_FORCE_WEIGHTS_ONLY_LOAD reaches `torch.load` only, and it is process-wide.

So an untrusted archive is read here instead, with torch's own pieces: its archive reader, payload
configs and tensor records, and its ExportedProgram deserializer, handed already-loaded objects so
that it unpickles nothing itself. Every pickled member goes through torch's weights-only unpickler
(`torch.load(weights_only=True)`: tensors, storages, plain containers and scalars) and nothing else
of the archive is executed. A member that unpickler refuses fails the load with BadInput naming the
archive, the member and what was refused; `--trust-pickle` loads the archive with
`torch.export.load` instead.
"""

from __future__ import annotations

import io
import math
import operator
import os
import pickle
import re
from typing import Any

from edgekit.core.errors import BadInput, first_line

TRUST_FIX = "pass --trust-pickle if you trust its author"

# torch.export.save writes its program under this name, and torch.export.load returns that one.
PROGRAM = "model"

_REFUSED = re.compile(r"WeightsUnpickler error: (?:Unsupported global: )?([^\n]+?)(?:\. |\.?$)", re.M)


def load_exported_program(location: str):
    """The ExportedProgram in the archive at `location`, every pickled member loaded weights-only."""
    import torch
    from torch._export.serde import schema
    from torch._export.serde.serialize import ExportedProgramDeserializer, _bytes_to_dataclass
    from torch.export.pt2_archive import constants as names
    from torch.export.pt2_archive._package import PT2ArchiveReader

    reader = PT2ArchiveReader(location)  # checks the archive_format record
    version = reader.read_string(names.ARCHIVE_VERSION_PATH)
    if version != names.ARCHIVE_VERSION_VALUE:
        raise BadInput(f"{location} is a version {version} ExportedProgram archive; this torch "
                       f"{torch.__version__} reads version {names.ARCHIVE_VERSION_VALUE}",
                       fix="re-save it with torch.export.save under this torch version")
    records = set(reader.get_file_names())
    program_record = names.MODELS_FILENAME_FORMAT.format(PROGRAM)
    if program_record not in records:
        raise BadInput(f"{location} holds no program {program_record!r}", fix="re-save it with torch.export.save")

    member = _Members(reader, records, location)
    sample_record = names.SAMPLE_INPUTS_FILENAME_FORMAT.format(PROGRAM)
    sample_bytes = reader.read_bytes(sample_record)
    sample_inputs = weights_only_load(sample_bytes, location, sample_record) if sample_bytes else None
    state_dict = member.payloads(names.WEIGHTS_DIR, names.WEIGHTS_CONFIG_FILENAME_FORMAT.format(PROGRAM))
    constants = member.payloads(names.CONSTANTS_DIR, names.CONSTANTS_CONFIG_FILENAME_FORMAT.format(PROGRAM))
    program = _bytes_to_dataclass(schema.ExportedProgram, reader.read_bytes(program_record))
    # Given objects (not bytes), the deserializer unpickles nothing itself.
    return ExportedProgramDeserializer().deserialize(program, state_dict, constants, sample_inputs)


class _Members:
    """The members of one open archive, as torch.export.save laid them out."""

    def __init__(self, reader: Any, records: set[str], location: str):
        self.reader = reader
        self.records = records
        self.location = location

    def unpickle(self, record: str) -> Any:
        """A pickled member, through torch's weights-only unpickler; BadInput if it refuses it."""
        return weights_only_load(self.reader.read_bytes(record), self.location, record)

    def payloads(self, folder: str, config_record: str) -> dict[str, Any]:
        """The weights (or constants) of the program: tensor records viewed as torch saved them,
        pickled ones unpickled weights-only (tensor subclasses, TorchScript and opaque objects)."""
        from torch.export.pt2_archive import constants as names
        from torch.export.pt2_archive._package import _build_file_map, _load_payload_config

        legacy = f"{folder}{PROGRAM}.pt"  # one pickled dict, as torch before 2.8 wrote it
        if legacy in self.records:
            return self.unpickle(legacy)
        if config_record not in self.records:
            raise BadInput(f"{self.location} has no {config_record}", fix="re-save it with torch.export.save")
        config = _load_payload_config(self.reader, config_record)
        raw = _build_file_map(self.reader, config, folder)  # plain tensor records, no pickle
        loaded: dict[str, Any] = {}
        for fqn, meta in config.config.items():
            record = os.path.join(folder, meta.path_name)
            if folder == names.WEIGHTS_DIR or meta.path_name.startswith(names.TENSOR_CONSTANT_FILENAME_PREFIX):
                loaded[fqn] = self.unpickle(record) if meta.use_pickle else self._tensor(raw, meta, folder, fqn)
            elif meta.path_name.startswith((names.CUSTOM_OBJ_FILENAME_PREFIX, names.OPAQUE_OBJ_FILENAME_PREFIX)):
                loaded[fqn] = self.unpickle(record)  # a TorchScript or Python object: weights-only refuses it
            else:
                raise BadInput(f"{self.location}: constant {fqn!r} is stored as {record}, a kind torch does not read",
                               fix="re-save it with torch.export.save")
        return loaded

    def _tensor(self, raw: dict[str, Any], meta: Any, folder: str, fqn: str) -> Any:
        """A tensor record viewed with the sizes, strides and offset it was saved with."""
        import torch
        from torch._export.serde.serialize import deserialize_size, deserialize_storage_offset, deserialize_stride
        from torch.export.pt2_archive import constants as names

        tm = meta.tensor_meta
        if tm is None:
            raise BadInput(f"{self.location}: no tensor layout for {fqn!r} in {folder}",
                           fix="re-save it with torch.export.save")
        tensor = torch.as_strided(raw[meta.path_name], deserialize_size(tm.sizes), deserialize_stride(tm.strides),
                                  deserialize_storage_offset(tm.storage_offset))
        if folder == names.WEIGHTS_DIR and meta.is_param:
            return torch.nn.Parameter(tensor, requires_grad=tm.requires_grad)
        return tensor


def weights_only_load(data: bytes, archive: str, member: str) -> Any:
    """Unpickle one archive member with torch's weights-only unpickler (the `torch.load(weights_only=True)`
    policy: tensors, storages, plain containers and scalars).

    BadInput naming the archive and member when that unpickler refuses it (or it is not a pickle torch reads).
    """
    import torch

    try:
        return torch.load(io.BytesIO(data), weights_only=True, mmap=False)
    except pickle.UnpicklingError as e:
        raise BadInput(f"{archive}: member {member} is a pickle that could run arbitrary code; the weights-only "
                       f"unpickler refused it ({_refused(e)})", fix=TRUST_FIX) from None
    except Exception as e:  # torch raises many types for a damaged or foreign pickle
        raise BadInput(f"{archive}: member {member} cannot be loaded weights-only: {first_line(e)}",
                       fix=f"re-save the model with torch.export.save, or {TRUST_FIX}") from None


def _refused(e: Exception) -> str:
    """What the weights-only unpickler refused, from its long message."""
    found = _REFUSED.search(str(e))
    return found.group(1).strip() if found else first_line(e)


def refuse_code_targets(ep, location: str) -> None:
    """BadInput unless every call in the program's graphs is a torch operator or a plain arithmetic function.

    The graph names its call targets by dotted path, and torch's deserializer resolves any attribute
    path under `torch`, `operator` and `math`. Some of those run code named by the archive when the
    program runs — `torch.export.custom_ops._call_custom_autograd_function_in_pre_dispatch` imports the
    module the graph names — and edgekit runs the program while opening it. So only dispatcher
    operators (`torch.ops.*`: OpOverload, OpOverloadPacket, higher-order operators), the symbolic-shape
    functions torch's serializer itself emits and `operator`/`math` functions may be called;
    `--trust-model-code` lifts the check.
    """
    import torch
    from torch._export.serde.serialize import _SYM_OPS

    allowed_types = (torch._ops.OpOverload, torch._ops.OpOverloadPacket, torch._ops.HigherOrderOperator)
    for owner, module in ep.graph_module.named_modules():
        for node in module.graph.nodes:
            if node.op not in ("call_function", "call_method", "call_module"):
                continue
            target = node.target
            if node.op == "call_function" and (
                    isinstance(target, allowed_types) or target in _SYM_OPS
                    or getattr(target, "__module__", None) in (operator.__name__, "_operator", math.__name__)):
                continue
            if node.op == "call_module":
                continue  # a submodule of the program itself (its graphs are checked in this loop)
            name = target if isinstance(target, str) else f"{getattr(target, '__module__', '?')}." \
                f"{getattr(target, '__qualname__', getattr(target, '__name__', repr(target)))}"
            where = f"{owner}." if owner else ""
            raise BadInput(f"{location}: node {where}{node.name} calls {name}, which is not a torch operator; "
                           "running it could run code the archive names",
                           fix="pass --trust-model-code if you trust its author")
