"""Logits read from files (docs/scenarios.md): one `[rows, V]` floating-point tensor per `.pt` / `.pth`,
`.npy` or `.safetensors` file, or a folder of such files (rows concatenated in file-name order). A source is
inspected when its scenario loads (`inspect`: every problem one `LogitsFileError` naming the file) and read
when a case needs its logits (`read_rows`: memory-mapped where the format allows, only the rows it takes).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from perfsuite.core.console import first_line
from perfsuite.core.dtypes import dtype_name

SUFFIXES = (".pt", ".pth", ".npy", ".safetensors")
SUFFIX_LIST = ".pt, .pth, .npy or .safetensors"
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
SAFETENSORS_DTYPES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64"}
KIND_PREFIX = "file:"
"""A sweep's `logits` names a file source as `file:NAME` (NAME: its key in `[inputs.files]`)."""


class LogitsFileError(ValueError):
    """A logits file or folder that cannot be used; the message is one line naming the file."""


@dataclass(frozen=True)
class FilePart:
    """One file of a source: its path, rows and dtype (torch's name), and whether it is read whole."""

    path: str
    rows: int
    dtype: str
    read_whole: bool = False  # an old-format .pt (no zip container) cannot be memory-mapped


@dataclass(frozen=True)
class LogitsSource:
    """A named file or folder of logits, as inspected: its V, its files and a digest of their bytes."""

    name: str
    path: str
    tensor: str  # the tensor's name in a .safetensors file or a .pt dict ('' : the only one)
    vocab: int
    parts: tuple[FilePart, ...]
    nbytes: int  # the tensors' data, all files
    digest: str  # sha256 of the files' bytes, 16 hex digits: a changed file is other settings

    @property
    def kind(self) -> str:
        """The name a sweep's `logits` gives it."""
        return KIND_PREFIX + self.name

    @property
    def rows(self) -> int:
        return sum(part.rows for part in self.parts)


def is_file_kind(kind: str) -> bool:
    return kind.startswith(KIND_PREFIX)


def inspect(name: str, path: str | Path, tensor: str = "") -> LogitsSource:
    """Check a file or folder of logits and describe it, reading headers (and hashing the bytes)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in SUFFIXES)
        if not files:
            raise LogitsFileError(f"{path}: a folder without {SUFFIX_LIST} files")
    elif path.exists():
        files = [path]
    else:
        raise LogitsFileError(f"{path}: no such file or folder")
    parts, vocab = [], 0
    for file in files:
        shape, dtype, whole, _ = _open(file, tensor)
        if len(shape) != 2:
            raise LogitsFileError(
                f"{file}: a {len(shape)}-D tensor of shape {list(shape)}; expected [rows, V]"
            )
        if dtype not in FLOAT_DTYPES:
            raise LogitsFileError(
                f"{file}: dtype {dtype}; expected floating-point logits ({', '.join(FLOAT_DTYPES)})"
            )
        if 0 in shape:
            raise LogitsFileError(f"{file}: an empty tensor of shape {list(shape)}; expected rows and V >= 1")
        rows, width = shape
        if parts and width != vocab:
            raise LogitsFileError(
                f"{file}: V {width}, but {files[0].name} has V {vocab}: the files of a folder share one V"
            )
        vocab = width
        parts.append(FilePart(str(file), rows, dtype, whole))
    nbytes = sum(part.rows * vocab * _itemsize(part.dtype) for part in parts)
    return LogitsSource(name, str(path), tensor, vocab, tuple(parts), nbytes, _digest(files))


def row_order(rows: int, batch: int, seed: int) -> torch.Tensor:
    """Which rows a batch takes: a permutation of the rows drawn from `seed`, repeated to `batch` (distinct
    rows while batch <= rows, every row tiled evenly beyond that)."""
    order = torch.randperm(rows, generator=torch.Generator().manual_seed(seed))
    return order.repeat(max(1, math.ceil(batch / rows)))[:batch]


def read_rows(source: LogitsSource, batch: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
    """`[batch, V]` logits on the CPU in `dtype`: the rows `row_order` picks, across the source's files."""
    order = row_order(source.rows, batch, seed)
    out = torch.empty((batch, source.vocab), dtype=dtype)
    start = 0
    for part in source.parts:
        mine = ((order >= start) & (order < start + part.rows)).nonzero().flatten()
        if len(mine):
            file = Path(part.path)
            shape, _, _, take = _open(file, source.tensor)
            if shape != (part.rows, source.vocab):
                raise LogitsFileError(f"{file}: changed since the scenario was loaded (now {list(shape)})")
            out[mine] = take(order[mine] - start).to(dtype)
        start += part.rows
    return out


def host_bytes(source: LogitsSource, batch: int) -> int:
    """Host memory a case of `batch` rows needs to read them: the rows in the files' dtypes and in float32
    at most, plus the whole of every file that cannot be read row by row."""
    whole = sum(part.rows * source.vocab * _itemsize(part.dtype) for part in source.parts if part.read_whole)
    widest = max(_itemsize(part.dtype) for part in source.parts)
    return whole + batch * source.vocab * (widest + 8)


def _itemsize(dtype: str) -> int:
    return getattr(torch, dtype).itemsize


@contextlib.contextmanager
def _reading(file: Path, unreadable: str) -> Iterator[None]:
    """A reader's error as one line naming the file: "cannot read" for an OSError, else `unreadable`."""
    try:
        yield
    except OSError as exc:
        said = exc.strerror or first_line(exc, 200, typed=False)
        raise LogitsFileError(f"{file}: cannot read ({said})") from None
    except Exception as exc:  # pickle, zip and the readers' own errors: not a file they read safely
        raise LogitsFileError(f"{file}: {unreadable} ({first_line(exc, 200, typed=False)})") from None


Rows = Callable[[torch.Tensor], torch.Tensor]


def _open(file: Path, tensor: str) -> tuple[tuple[int, ...], str, bool, Rows]:
    """The tensor of one file: its shape, torch dtype name, whether it is read whole, and its rows by index
    (in the file's dtype)."""
    suffix = file.suffix.lower()
    if suffix in (".pt", ".pth"):
        mapped = zipfile.is_zipfile(file)
        with _reading(file, "not a tensor file torch.load reads with weights_only=True"):
            value = torch.load(file, map_location="cpu", weights_only=True, mmap=mapped)
        if isinstance(value, dict):
            value = value[_pick(file, list(value), tensor)]
        elif tensor:
            raise LogitsFileError(f"{file}: holds one tensor, not a dict: leave out tensor = {tensor!r}")
        if not isinstance(value, torch.Tensor):
            raise LogitsFileError(f"{file}: holds a {type(value).__name__}, expected a tensor")
        return tuple(value.shape), dtype_name(value.dtype), not mapped, value.__getitem__
    if suffix == ".npy":
        import numpy as np

        with _reading(file, "not a .npy file numpy reads"):
            array = np.load(file, mmap_mode="r", allow_pickle=False)

        def npy_rows(index: torch.Tensor) -> torch.Tensor:
            native = array.dtype.newbyteorder("=")
            return torch.from_numpy(np.ascontiguousarray(array[index.numpy()], dtype=native))

        return tuple(array.shape), array.dtype.name, False, npy_rows
    if suffix == ".safetensors":
        try:
            from safetensors import safe_open
        except ImportError:
            raise LogitsFileError(f"{file}: install safetensors to read .safetensors files") from None
        with _reading(file, "not a .safetensors file"):
            handle = safe_open(str(file), framework="pt", device="cpu")
        data = handle.get_slice(_pick(file, list(handle.keys()), tensor))

        def safetensors_rows(index: torch.Tensor) -> torch.Tensor:
            unique, where = torch.unique(index, return_inverse=True)
            return torch.cat([data[int(i) : int(i) + 1] for i in unique])[where]

        dtype = data.get_dtype()
        return tuple(data.get_shape()), SAFETENSORS_DTYPES.get(dtype, dtype.lower()), False, safetensors_rows
    raise LogitsFileError(f"{file}: unsupported file type {file.suffix!r}; expected {SUFFIX_LIST}")


def _pick(file: Path, names: list, tensor: str) -> object:
    """The name of the tensor to read: `tensor`, or the only one's when no name is given."""
    if tensor:
        if tensor not in names:
            raise LogitsFileError(f"{file}: no tensor {tensor!r}; it holds: {', '.join(map(str, names))}")
        return tensor
    if len(names) != 1:
        listed = ", ".join(map(str, names)) or "none"
        raise LogitsFileError(
            f"{file}: holds {len(names)} tensors ({listed}); name one: {{ path = ..., tensor = NAME }}"
        )
    return names[0]


def _digest(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode() + b"\0")
        with _reading(file, "cannot read"), open(file, "rb") as handle:
            while chunk := handle.read(1 << 22):
                digest.update(chunk)
    return digest.hexdigest()[:16]
