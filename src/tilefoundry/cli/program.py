"""Loading a DSL file for a subcommand: which function runs, its DimVar bindings, its inputs.

The command works on files, the compiler on Functions, so this module is the seam: it reads the
file (a missing or unreadable file is the user's mistake, reported like any located error),
picks the entry (`--func`, else the last `@func`/`@module` the file defines, which is how
example files read top to bottom: helpers first, the entry last), and builds inputs from the
parameter types so that `run` works without any data.
"""

from __future__ import annotations

import io
import sys
import tokenize
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tilefoundry.cli.signals import Interrupted
from tilefoundry.errors import VerifyError
from tilefoundry.frontend import parse_source
from tilefoundry.frontend.source import program_exit_error
from tilefoundry.ir.core import Call, Module, SourceSpan, Var
from tilefoundry.ir.core.graph import iter_nodes
from tilefoundry.ir.hir import Function
from tilefoundry.ir.types import TensorType, is_static
from tilefoundry.rules import INDEX_RANGE


@dataclass(frozen=True)
class Program:
    """A parsed file: every top-level Function/Module by name, in definition order."""

    path: str
    objects: dict[str, Function | Module]

    def entry(self, name: str | None) -> Function:
        """The Function a command acts on; `name` may be `fn`, `Module.fn` or a module's name."""
        if not self.objects:
            raise VerifyError(
                f"{self.path}: defines no @func or @module", location=SourceSpan(self.path, 1, 1)
            )
        if name is None:
            return _last_function(list(self.objects.values())[-1])
        head, _, tail = name.partition(".")
        if head in self.objects:
            found = self.objects[head]
            if not tail:
                return _last_function(found)
            if isinstance(found, Module):
                for fn in found.functions:
                    if fn.name == tail:
                        return fn
        for obj in self.objects.values():
            if isinstance(obj, Module) and not tail:
                for fn in obj.functions:
                    if fn.name == head:
                        return fn
        raise VerifyError(
            f"{self.path}: no function '{name}'; it defines {', '.join(self.names())}",
            location=SourceSpan(self.path, 1, 1),
        )

    def names(self) -> list[str]:
        """Every name `--func` accepts, for messages and `check`'s summary."""
        out: list[str] = []
        for key, obj in self.objects.items():
            if isinstance(obj, Module):
                out.extend(f"{key}.{fn.name}" for fn in obj.functions)
            else:
                out.append(key)
        return out


def _last_function(obj: Function | Module) -> Function:
    return obj.functions[-1] if isinstance(obj, Module) else obj


def load_program(path: str) -> Program:
    """Parse the DSL file at `path`; every failure is a located VerifyError."""
    try:
        text = _read_source(path)
    except FileNotFoundError:
        raise VerifyError(f"{path}: no such file", location=SourceSpan(path, 1, 1)) from None
    except (OSError, UnicodeDecodeError, SyntaxError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise VerifyError(
            f"{path}: cannot read the file ({reason})", location=SourceSpan(path, 1, 1)
        ) from None
    script = Path(path).resolve()
    try:
        with _folder_first_on_path(script.parent):
            namespace = parse_source(text, path, {"__file__": str(script)})
    except KeyboardInterrupt as err:
        if isinstance(err, Interrupted):
            raise
        raise program_exit_error(err, path) from None  # the file raised it, not Ctrl-C
    objects = {
        key: value
        for key, value in namespace.items()
        if isinstance(value, Function | Module) and not key.startswith("_")
    }
    return Program(path, objects)


@contextmanager
def _folder_first_on_path(folder: Path) -> Iterator[None]:
    """While the file's top level runs, its folder comes first on `sys.path`, as `python FILE`
    puts it, so a program split over files (sizes in one, the model in another) imports its
    siblings from any working directory. The entry is taken out again afterwards: loading a
    program must not change what later imports of the calling process find."""
    entry = str(folder)
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        if entry in sys.path:
            sys.path.remove(entry)


MAX_PROGRAM_BYTES = 64 * 2**20
"""A DSL file is source code; anything larger is not a program (e.g. a data file by mistake)."""


def _read_source(path: str) -> str:
    """The file's text decoded as Python decodes source (a UTF-8 BOM or a coding cookie is
    honoured); a FIFO or device (which would block or never end) and an oversized file are
    refused before reading."""
    file = Path(path)
    if file.exists() and not file.is_file():
        raise OSError(0, "not a regular file (a DSL file is Python source)")
    if file.stat().st_size > MAX_PROGRAM_BYTES:
        raise OSError(0, f"larger than {MAX_PROGRAM_BYTES // 2**20} MiB, so not a DSL program")
    data = file.read_bytes()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


def dim_vars(fn: Function) -> dict[str, Any]:
    """The DimVars of the parameters, by name, in first-appearance order."""
    found: dict[str, Any] = {}
    for param in fn.params:
        if isinstance(param.type, TensorType):
            for dim in param.type.shape:
                if not is_static(dim) and hasattr(dim, "lo"):
                    found.setdefault(dim.name, dim)
    return found


def dim_options(pairs: list[tuple[str, int]]) -> dict[str, int]:
    """The `--dim NAME=INT` options as a dict, refusing a name given twice."""
    given: dict[str, int] = {}
    for name, value in pairs:
        if name in given:
            raise VerifyError(
                f"--dim {name} is given twice ({given[name]} and {value}); give each DimVar once"
            )
        given[name] = value
    return given


def bind_dims(
    fn: Function, given: dict[str, int], rng: np.random.Generator | None
) -> dict[str, int]:
    """A value for each DimVar: the one given (checked against its envelope) or a seeded draw
    (without `rng`, every DimVar must be given)."""
    variables = dim_vars(fn)
    unknown = sorted(set(given) - set(variables))
    if unknown:
        raise VerifyError(
            f"Function {fn.name}: --dim names {', '.join(unknown)}, but its parameters use "
            f"{', '.join(variables) or 'no DimVars'}"
        )
    missing = [name for name in variables if name not in given]
    if rng is None and missing:
        raise VerifyError(
            f"Function {fn.name}: its parameters use the DimVar(s) {', '.join(variables)}; "
            f"give --dim for {', '.join(missing)} (e.g. --dim {missing[0]}=128)"
        )
    bound: dict[str, int] = {}
    for name, var in variables.items():
        value = given[name] if name in given else draw_integer(rng, var.lo, var.hi)
        if not var.lo <= value < var.hi:
            raise VerifyError(
                f"Function {fn.name}: --dim {name}={value} is outside {name}'s range "
                f"[{var.lo}, {var.hi})"
            )
        bound[name] = value
    return bound


INT64 = (-(2**63), 2**63 - 1)


def draw_integer(rng: np.random.Generator, lo: int, hi: int) -> int:
    """A seeded uniform draw from [lo, hi), also for an envelope past int64, where numpy's
    `integers` stops (`DimVar('N', 1, 10**30)`): random bytes, rejecting draws past the width."""
    if INT64[0] <= lo and hi - 1 <= INT64[1]:
        return int(rng.integers(lo, hi))
    width = hi - lo
    bits = width.bit_length()
    while True:
        value = int.from_bytes(rng.bytes((bits + 7) // 8), "little") >> (-bits % 8)
        if value < width:
            return lo + value


def concrete_shape(type_: TensorType, bound: dict[str, int]) -> tuple[int, ...]:
    shape = []
    for dim in type_.shape:
        if is_static(dim):
            shape.append(int(dim))
        elif getattr(dim, "name", None) in bound:
            shape.append(bound[dim.name])
        else:
            raise VerifyError(f"parameter extent {dim} is not a plain DimVar; pass --inputs")
    return tuple(shape)


DRAW_CHUNK = 1 << 16
"""Elements drawn at a time: the draw's own dtype (float64 for a bool's coin, int64 for an
integer) is wider than most parameters', so only one block of it is ever alive."""


def random_inputs(fn: Function, bound: dict[str, int], rng: np.random.Generator) -> list:
    """One array per parameter, drawn from its type: floats ~ N(0, 1) scaled down so deep
    programs stay finite, integers in a small range (a parameter the body uses as an index, in
    the range it indexes: `index_extents`), booleans fair. Each array is allocated in its own
    dtype and filled a block at a time (the same values as one whole draw), so drawing needs no
    more memory than the inputs themselves."""
    arrays = []
    extents = index_extents(fn, bound)
    for param in fn.params:
        type_ = param.type
        if not isinstance(type_, TensorType):
            raise VerifyError(
                f"Function {fn.name}: parameter '{param.name}' is not a tensor; pass --inputs"
            )
        array = np.empty(concrete_shape(type_, bound), dtype=type_.dtype.to_numpy())
        flat = array.reshape(-1)
        draw = _drawer(type_.dtype, rng, extents.get(param))
        for start in range(0, flat.size, DRAW_CHUNK):
            block = flat[start : start + DRAW_CHUNK]
            block[...] = draw(block.size)
        arrays.append(array)
    return arrays


def index_extents(fn: Function, bound: dict[str, int]) -> dict[Var, int]:
    """Each parameter the body passes straight to an op's index operand (INDEX_RANGE: Gather's
    and ScatterAdd's indices), with the smallest extent it indexes (its DimVars bound)."""
    extents: dict[Var, int] = {}
    params = set(fn.params)
    for node in iter_nodes(fn.body):
        if not isinstance(node, Call) or not INDEX_RANGE.has(type(node.target)):
            continue
        types = [arg.type for arg in node.args]
        for position, extent in INDEX_RANGE.lookup(type(node.target))(node.target, types).items():
            arg = node.args[position]
            name = getattr(extent, "name", None)
            extent = int(extent) if is_static(extent) else bound.get(name)
            if arg in params and extent:
                extents[arg] = min(extent, extents.get(arg, extent))
    return extents


def _drawer(dtype, rng: np.random.Generator, index_extent: int | None = None):
    if dtype.is_bool:
        return lambda n: rng.random(n) < 0.5
    if dtype.is_int and index_extent is not None:
        return lambda n: rng.integers(0, index_extent, size=n)
    if dtype.is_int:
        low = 0 if dtype.is_unsigned else -8
        return lambda n: rng.integers(low, 8, size=n)
    # drawn in f32 unless the parameter is f64: no f64 copy of an f32 input
    wide = np.float64 if dtype.itemsize_bits > 32 else np.float32
    return lambda n: rng.standard_normal(n, dtype=wide) * wide(0.5)


def load_inputs(fn: Function, paths: list[str]) -> list[np.ndarray]:
    if len(paths) != len(fn.params):
        raise VerifyError(
            f"Function {fn.name}: takes {len(fn.params)} input(s) "
            f"({', '.join(p.name for p in fn.params)}); --inputs gave {len(paths)}"
        )
    arrays = []
    for param, path in zip(fn.params, paths, strict=True):
        try:
            _check_npy_size(path)
            array = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            raise VerifyError(f"{path}: no such file", location=SourceSpan(path, 1, 1)) from None
        except VerifyError:
            raise
        except (SyntaxError, tokenize.TokenError) as err:  # raised by numpy's header parser
            raise VerifyError(
                f"{path}: not a .npy array (its header does not parse: {err})",
                location=SourceSpan(path, 1, 1),
            ) from None
        except (OSError, ValueError) as err:
            raise VerifyError(
                f"{path}: not a .npy array ({err})", location=SourceSpan(path, 1, 1)
            ) from None
        arrays.append(_saved_narrow_float(array, param.type))
    return arrays


def _saved_narrow_float(array: np.ndarray, type_: object) -> np.ndarray:
    """An array of raw bytes (`|V2`, `|V1`) for a parameter of an ml_dtypes float (bf16, the
    fp8 and fp4 types), viewed as that dtype: numpy cannot record those dtypes in a .npy
    header, so `np.save` of a bfloat16 array writes `|V2`, and this is the only way to give
    such a parameter data. Anything else is left for the input check to judge."""
    if not isinstance(type_, TensorType) or array.dtype.kind != "V" or array.dtype.fields:
        return array
    carrier = np.dtype(type_.dtype.to_numpy())
    if carrier.kind != "V" or carrier.itemsize != array.dtype.itemsize:
        return array
    return array.view(carrier)


NPY_HEADER_READERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
    # 3.0 is 2.0's layout with a UTF-8 header; the fields the size check reads are ASCII
    (3, 0): np.lib.format.read_array_header_2_0,
}


def _check_npy_size(path: str) -> None:
    """Refuse a file that is not a regular file (a FIFO would block, /dev/zero never ends) or
    whose header claims more data than the file holds, before numpy allocates for the claim."""
    file = Path(path)
    if file.exists() and not file.is_file():
        raise VerifyError(f"{path}: not a regular file", location=SourceSpan(path, 1, 1))
    with open(path, "rb") as handle:
        version = np.lib.format.read_magic(handle)
        read_header = NPY_HEADER_READERS.get(version)
        if read_header is None:
            return  # np.load refuses a version it cannot read before allocating
        shape, _, dtype = read_header(handle)
        offset = handle.tell()
    if dtype.hasobject:
        return  # np.load refuses it (allow_pickle=False)
    claimed = int(np.prod(shape, dtype=object)) * dtype.itemsize
    held = file.stat().st_size - offset
    if claimed > held:
        raise VerifyError(
            f"{path}: its header claims a {dtype} array of shape {tuple(shape)} "
            f"({claimed} bytes), but the file holds {held} bytes of data",
            location=SourceSpan(path, 1, 1),
        )
