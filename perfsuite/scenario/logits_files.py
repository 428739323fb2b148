"""Logits read from files: one `[rows, V]` floating-point tensor per file, or a folder of such files.

Formats: `.pt` / `.pth` (`torch.load(weights_only=True)`: a tensor, or a dict of tensors), `.npy` (numpy)
and `.safetensors` (the `safetensors` package). A file holding several tensors needs the name of one
(`tensor`). A folder's files (those four suffixes, not recursive) are read in file-name order and their
rows concatenated; they must share one V (their dtypes may differ).

A source is inspected when its scenario loads (`inspect`: shapes, dtypes and a digest of the bytes; every
problem is one `LogitsFileError` naming the file) and read when a case needs its logits (`read_rows`):
a case of batch B takes B rows in an order drawn from the scenario's seed, distinct rows while B <= rows,
every row repeated (tiled, each at most once more than any other) beyond that. `.pt` and `.npy` files
are memory-mapped, so only the rows a case takes are read.
"""

from __future__ import annotations

import hashlib
import math
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from perfsuite.core.console import first_line

SUFFIXES = (".pt", ".pth", ".npy", ".safetensors")
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
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


def files_in(path: Path) -> list[Path]:
    """The logits files of a folder, in name order."""
    return sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in SUFFIXES)


def inspect(name: str, path: str | Path, tensor: str = "") -> LogitsSource:
    """Check a file or folder of logits and describe it, reading headers (and hashing the bytes)."""
    path = Path(path)
    if path.is_dir():
        files = files_in(path)
        if not files:
            raise LogitsFileError(f"{path}: a folder without {_suffix_list()} files")
    elif path.exists():
        files = [path]
    else:
        raise LogitsFileError(f"{path}: no such file or folder")
    parts, vocab, nbytes = [], None, 0
    for file in files:
        rows, width, dtype, whole = _header(file, tensor)
        if vocab is not None and width != vocab:
            raise LogitsFileError(
                f"{file}: V {width}, but {files[0].name} has V {vocab}: the files of a folder share one V"
            )
        vocab = width
        parts.append(FilePart(str(file), rows, dtype, whole))
        nbytes += rows * width * torch.empty((), dtype=getattr(torch, dtype)).element_size()
    assert vocab is not None
    return LogitsSource(name, str(path), tensor, vocab, tuple(parts), nbytes, _digest(files))


def row_order(rows: int, batch: int, seed: int) -> torch.Tensor:
    """Which rows a batch takes: a permutation of the rows drawn from `seed`, repeated to `batch`."""
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
            rows = _read_part_rows(part, source, order[mine] - start)
            out[mine] = rows.to(dtype)
        start += part.rows
    return out


def host_bytes(source: LogitsSource, batch: int) -> int:
    """Host memory a case of `batch` rows needs to read them: the rows in the files' dtypes and in float32
    at most, plus the whole of every file that cannot be read row by row."""
    whole = sum(part.rows * source.vocab * _itemsize(part.dtype) for part in source.parts if part.read_whole)
    widest = max(_itemsize(part.dtype) for part in source.parts)
    return whole + batch * source.vocab * (widest + 8)


# ---------------------------------------------------------------- formats


def _suffix_list() -> str:
    return ", ".join(SUFFIXES[:-1]) + f" or {SUFFIXES[-1]}"


def _itemsize(dtype: str) -> int:
    return torch.empty((), dtype=getattr(torch, dtype)).element_size()


def _said(exc: BaseException) -> str:
    """What a file reader said, for a one-line message."""
    return first_line(exc, 200, typed=False)


def _header(file: Path, tensor: str) -> tuple[int, int, str, bool]:
    """(rows, V, torch dtype name, read whole) of one file, after checking what it holds."""
    suffix = file.suffix.lower()
    if suffix in (".pt", ".pth"):
        value, whole = _load_pt(file, tensor)
        shape, dtype = tuple(value.shape), str(value.dtype).removeprefix("torch.")
    elif suffix == ".npy":
        array = _load_npy(file)
        shape, dtype, whole = tuple(array.shape), array.dtype.name, False
    elif suffix == ".safetensors":
        shape, dtype = _safetensors_header(file, tensor)
        whole = False
    else:
        raise LogitsFileError(f"{file}: unsupported file type {file.suffix!r}; expected {_suffix_list()}")
    if len(shape) != 2:
        raise LogitsFileError(f"{file}: a {len(shape)}-D tensor of shape {list(shape)}; expected [rows, V]")
    if dtype not in FLOAT_DTYPES:
        raise LogitsFileError(
            f"{file}: dtype {dtype}; expected floating-point logits ({', '.join(FLOAT_DTYPES)})"
        )
    if shape[0] == 0 or shape[1] == 0:
        raise LogitsFileError(f"{file}: an empty tensor of shape {list(shape)}; expected rows and V >= 1")
    return shape[0], shape[1], dtype, whole


def _pick(file: Path, named: dict[str, object], tensor: str) -> object:
    """The tensor called `tensor`, or the only one when no name is given."""
    if tensor:
        if tensor not in named:
            raise LogitsFileError(f"{file}: no tensor {tensor!r}; it holds: {', '.join(map(str, named))}")
        return named[tensor]
    if len(named) != 1:
        names = ", ".join(map(str, named)) or "none"
        raise LogitsFileError(
            f"{file}: holds {len(named)} tensors ({names}); name one: {{ path = ..., tensor = NAME }}"
        )
    return next(iter(named.values()))


def _load_pt(file: Path, tensor: str) -> tuple[torch.Tensor, bool]:
    """The file's tensor (memory-mapped where the file is a zip container) and whether it was read whole."""
    mapped = zipfile.is_zipfile(file)
    try:
        value = torch.load(file, map_location="cpu", weights_only=True, mmap=mapped)
    except OSError as exc:
        raise LogitsFileError(f"{file}: cannot read ({exc.strerror or _said(exc)})") from None
    except Exception as exc:  # pickle, zip and torch's own errors: not a file torch reads safely
        raise LogitsFileError(
            f"{file}: not a tensor file torch.load reads with weights_only=True ({_said(exc)})"
        ) from None
    if isinstance(value, dict):
        value = _pick(file, value, tensor)
    elif tensor:
        raise LogitsFileError(f"{file}: holds one tensor, not a dict: leave out tensor = {tensor!r}")
    if not isinstance(value, torch.Tensor):
        raise LogitsFileError(f"{file}: holds a {type(value).__name__}, expected a tensor")
    return value, not mapped


def _load_npy(file: Path):
    import numpy as np

    try:
        return np.load(file, mmap_mode="r", allow_pickle=False)
    except OSError as exc:
        raise LogitsFileError(f"{file}: cannot read ({exc.strerror or _said(exc)})") from None
    except Exception as exc:
        raise LogitsFileError(f"{file}: not a .npy file numpy reads ({_said(exc)})") from None


SAFETENSORS_DTYPES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64"}


def _safe_open(file: Path):
    try:
        from safetensors import safe_open
    except ImportError:
        raise LogitsFileError(f"{file}: install safetensors to read .safetensors files") from None
    try:
        return safe_open(str(file), framework="pt", device="cpu")
    except OSError as exc:
        raise LogitsFileError(f"{file}: cannot read ({exc.strerror or _said(exc)})") from None
    except Exception as exc:
        raise LogitsFileError(f"{file}: not a .safetensors file ({_said(exc)})") from None


def _safetensors_header(file: Path, tensor: str) -> tuple[tuple[int, ...], str]:
    with _safe_open(file) as handle:
        name = _pick(file, {key: key for key in handle.keys()}, tensor)  # noqa: SIM118 (not a dict)
        part = handle.get_slice(name)
        dtype = part.get_dtype()
        return tuple(part.get_shape()), SAFETENSORS_DTYPES.get(dtype, dtype.lower())


def _read_part_rows(part: FilePart, source: LogitsSource, rows: torch.Tensor) -> torch.Tensor:
    """Rows of one file, in the file's dtype (refused if the file changed shape since it was inspected)."""
    file = Path(part.path)
    suffix = file.suffix.lower()
    if suffix in (".pt", ".pth"):
        data, _ = _load_pt(file, source.tensor)
        _check_unchanged(file, (part.rows, source.vocab), tuple(data.shape))
        return data[rows]
    if suffix == ".npy":
        import numpy as np

        array = _load_npy(file)
        _check_unchanged(file, (part.rows, source.vocab), array.shape)
        picked = np.ascontiguousarray(array[rows.numpy()], dtype=array.dtype.newbyteorder("="))
        return torch.from_numpy(picked)
    with _safe_open(file) as handle:
        name = _pick(file, {key: key for key in handle.keys()}, source.tensor)  # noqa: SIM118
        data = handle.get_slice(name)
        _check_unchanged(file, (part.rows, source.vocab), tuple(data.get_shape()))
        unique, where = torch.unique(rows, return_inverse=True)
        return torch.cat([data[int(i) : int(i) + 1] for i in unique])[where]


def _check_unchanged(file: Path, inspected: tuple[int, int], shape: tuple[int, ...]) -> None:
    if tuple(shape) != inspected:
        raise LogitsFileError(f"{file}: changed since the scenario was loaded (now {list(shape)})")


def _digest(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode() + b"\0")
        try:
            with open(file, "rb") as handle:
                while chunk := handle.read(1 << 22):
                    digest.update(chunk)
        except OSError as exc:
            raise LogitsFileError(f"{file}: cannot read ({exc.strerror or _said(exc)})") from None
    return digest.hexdigest()[:16]
