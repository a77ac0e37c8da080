"""Arrays passed to compiled code by address.

Calling a compiled function costs about 0.12 µs for every array argument (numba checks
and unpacks each one), and the mask walk takes 62 of them: 7.7 µs a call, more than a
whole walk that finds its answer in the tables. Most of those arrays are the same from
one call to the next. `pack` writes their addresses and shapes into one int64 array
once, and the compiled side turns each entry back into an array view with `view_1d` /
`view_2d`, which costs nothing at run time.

The views do not own their memory: whoever packs must keep the arrays alive, and pack
again when one is replaced (grown), for as long as the packed array is used.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np
from numba import literal_unroll, njit, types
from numba.core import cgutils
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic, overload
from numba.np.numpy_support import from_dtype as numba_from_dtype

# Per array: address, rows, columns (1 for 1-D arrays).
FIELDS = 3


def pack(arrays, dtypes, trailing: Sequence[int] = ()) -> np.ndarray:
    """The addresses and shapes of `arrays`, FIELDS int64 per array, then the integers
    `trailing` (a group's scalars). Each array must be C-contiguous, writeable, at most
    2-D and of the dtype given for its place (the compiled reader assumes those); a
    ValueError says which is not."""
    arrays = tuple(arrays)
    dtypes = tuple(dtypes)
    expected = _expected_codes.get(dtypes)
    first = expected is None
    if first:
        expected = np.array([_code_of_dtype(d) for d in dtypes], dtype=np.int64).tobytes()
    n = FIELDS * len(arrays)
    out = np.empty(n + len(trailing), dtype=np.int64)
    out[n:] = trailing
    codes = np.empty(len(arrays), dtype=np.int64)
    try:
        # One compiled pass over the group (numba types the tuple, and compiles a pass,
        # once per kind of group): each new grammar packs dozens of arrays in its time
        # to first mask, where a loop here was a large part of the first mask. The pass
        # also writes each array's type code, which the check below compares.
        if arrays:
            _pack_into(arrays, out, codes)
    except Exception:  # numba could not type a member (not an array): say which
        _check(arrays, tuple(np.dtype(d) for d in dtypes))
        raise
    if codes.tobytes() != expected:
        _check(arrays, tuple(np.dtype(d) for d in dtypes))
        raise ValueError(f"arrays {arrays!r:.200} do not match the dtypes {dtypes}")
    if first:
        # The first group of its kind (in a warm-up, as a rule): the address readers
        # `repoint` will want for its arrays are loaded now, not inside the mask that
        # first grows one of them.
        for a in arrays:
            _address_reader(a)
        _expected_codes[dtypes] = expected
    return out


def _check(arrays, expected) -> None:
    """Raises the ValueError that names the first array `pack` cannot take."""
    if len(arrays) != len(expected):
        raise ValueError(f"{len(arrays)} arrays for {len(expected)} dtypes")
    for i, (a, dtype) in enumerate(zip(arrays, expected, strict=False)):
        if not isinstance(a, np.ndarray):
            raise ValueError(f"array {i}: a {type(a).__name__}, not an array")
        ndim = a.ndim
        if (
            (a.dtype is not dtype and a.dtype != dtype)
            or a.flags.num & _CONTIGUOUS_WRITEABLE != _CONTIGUOUS_WRITEABLE
            or ndim > 2
        ):
            flags = a.flags
            raise ValueError(
                f"array {i}: {a.dtype}, {ndim}-D, contiguous {flags.c_contiguous}, "
                f"writeable {flags.writeable}; expected a writeable contiguous {dtype} array"
            )


def repoint(packed: np.ndarray, index: int, a: np.ndarray, dtypes) -> None:
    """Entry `index` of a group packed with `dtypes` rewritten for array `a`, which
    replaces the array packed there (a grown copy: the same kind, checked)."""
    expected = np.dtype(tuple(dtypes)[index])
    if (
        (a.dtype is not expected and a.dtype != expected)
        or a.flags.num & _CONTIGUOUS_WRITEABLE != _CONTIGUOUS_WRITEABLE
        or a.ndim > 2
    ):
        raise ValueError(f"array {index}: {a.dtype} replaces a {expected} array")
    shape = a.shape
    at = index * FIELDS
    packed[at] = _address_reader(a)(a)
    packed[at + 1] = shape[0]
    packed[at + 2] = shape[1] if len(shape) == 2 else 1


# numpy's flag bits (ndarray.flags.num) that pack requires.
_CONTIGUOUS_WRITEABLE = 0x0001 | 0x0400  # NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_WRITEABLE
# dtypes of a group -> the type codes its arrays must have, as bytes.
_expected_codes: dict[tuple, bytes] = {}
# Type codes (`_type_code`) by numba's name of a dtype; 0 is "not an array pack takes".
_CODE_BY_DTYPE_NAME = {"int64": 1, "int32": 2, "bool": 3, "uint8": 4, "float32": 5, "float64": 6, "int8": 7}


def _code_of_dtype(dtype) -> int:
    name = str(numba_from_dtype(np.dtype(dtype)))
    code = _CODE_BY_DTYPE_NAME.get(name)
    if code is None:
        raise ValueError(f"pack takes no {name} arrays")
    return code


def _type_code(a) -> int:
    """The dtype's code of an array the views may read (C-contiguous, writeable, 1-D or
    2-D), else 0. Compiled code decides it from the array's type (the overload below)."""
    if (
        not isinstance(a, np.ndarray)
        or a.ndim not in (1, 2)
        or a.flags.num & _CONTIGUOUS_WRITEABLE != _CONTIGUOUS_WRITEABLE
    ):
        return 0
    try:
        return _CODE_BY_DTYPE_NAME.get(str(numba_from_dtype(a.dtype)), 0)
    except Exception:  # a dtype numba has no type for (numba raises its own error)
        return 0


@overload(_type_code)
def _type_code_typed(a):
    code = 0
    if isinstance(a, types.Array) and a.layout == "C" and a.mutable and a.ndim in (1, 2):
        code = _CODE_BY_DTYPE_NAME.get(str(a.dtype), 0)
    return lambda a: code


def _columns(a) -> int:
    """Columns of a 2-D array, 1 for any other."""
    return a.shape[1] if a.ndim == 2 else 1


@overload(_columns)
def _columns_typed(a):
    if a.ndim == 2:
        return lambda a: a.shape[1]
    return lambda a: 1


@njit(cache=True)
def _pack_into_py(arrays, out, codes):
    k = 0
    for a in literal_unroll(arrays):
        out[3 * k] = a.ctypes.data
        out[3 * k + 1] = a.shape[0]
        out[3 * k + 2] = _columns(a)
        codes[k] = _type_code(a)
        k += 1


# Compiled, or (NUMBA_DISABLE_JIT) the plain function, which reads the same.
_pack_into = _pack_into_py


@njit(cache=True)
def _address_of(a):
    return a.ctypes.data


# (dtype character, dimensions) -> a compiled address reader, called without numba's
# dispatcher: a grown table is repointed inside a mask, many times over a run.
_reader_by_type: dict[tuple, object] = {}


def _address_reader(a: np.ndarray):
    key = (a.dtype.char, a.ndim)
    reader = _reader_by_type.get(key)
    if reader is None:
        import numba

        if hasattr(_address_of, "compile"):
            reader = _address_of.compile((numba.typeof(a),))
        else:  # NUMBA_DISABLE_JIT: the plain function
            reader = _address_of
        _reader_by_type[key] = reader
    return reader


def _make_view(context, builder, arrty, dtype, address, shape):
    ary = context.make_array(arrty)(context, builder)
    data_type = context.get_data_type(dtype)
    itemsize = context.get_abi_sizeof(data_type)
    data = builder.inttoptr(address, data_type.as_pointer())
    # C order: the last axis moves by one item, each earlier one by the product after it.
    strides = [context.get_constant(types.intp, itemsize)]
    for dim in reversed(shape[1:]):
        strides.insert(0, builder.mul(strides[0], dim))
    context.populate_array(
        ary,
        data=data,
        shape=cgutils.pack_array(builder, shape),
        strides=cgutils.pack_array(builder, strides),
        itemsize=context.get_constant(types.intp, itemsize),
        meminfo=None,
    )
    return ary._getvalue()


def _view_codegen(arrty, ndim: int):
    """Code that reads entry `index` of a packed array and builds the view: address,
    then the first `ndim` of (rows, columns)."""

    def codegen(context, builder, sig, args):
        packed_val, index_val, _ = args
        entries = context.make_array(sig.args[0])(context, builder, packed_val)
        base = builder.mul(index_val, context.get_constant(types.intp, FIELDS))
        shape = cgutils.unpack_tuple(builder, entries.shape)
        strides = cgutils.unpack_tuple(builder, entries.strides)

        def field(k):
            at = builder.add(base, context.get_constant(types.intp, k))
            return builder.load(cgutils.get_item_pointer2(context, builder, entries.data, shape, strides, "C", [at]))

        return _make_view(context, builder, arrty, arrty.dtype, field(0), [field(1 + d) for d in range(ndim)])

    return codegen


@intrinsic
def view_1d(typingctx, packed, index, dtype):
    """The 1-D array at entry `index` of a `pack`ed array, of `dtype` (a numpy scalar
    type such as np.int32, a compile-time constant)."""
    arrty = types.Array(dtype.instance_type, 1, "C")
    return arrty(packed, types.intp, dtype), _view_codegen(arrty, 1)


@intrinsic
def view_2d(typingctx, packed, index, dtype):
    """The 2-D array at entry `index` of a `pack`ed array (see view_1d)."""
    arrty = types.Array(dtype.instance_type, 2, "C")
    return arrty(packed, types.intp, dtype), _view_codegen(arrty, 2)


# A group's spec, one entry per member in tuple order: a numpy type character
# (q int64, i int32, ? bool, B uint8) for a 1-D array, the same after "2" for a 2-D
# one, or "#" for an int64 scalar. `pack` holds the arrays in order and the scalars
# after them, in order.
_SPEC_DTYPES = {"q": np.int64, "i": np.int32, "?": np.bool_, "B": np.uint8}


def parse_spec(spec: str) -> list[tuple[str, int]]:
    """(kind, ndim) per member: kind a numpy type character, or "#" with ndim 0."""
    members = []
    ndim = 1
    for ch in spec:
        if ch == "2":
            ndim = 2
            continue
        if ch == "#":
            members.append(("#", 0))
        elif ch in _SPEC_DTYPES:
            members.append((ch, ndim))
        else:
            raise ValueError(f"group spec {spec!r}: {ch!r} is not a member kind")
        ndim = 1
    return members


def spec_dtypes(spec: str) -> tuple[tuple, tuple[int, ...]]:
    """The dtypes of a spec's arrays in order, and the places of its scalars."""
    members = parse_spec(spec)
    dtypes = tuple(_SPEC_DTYPES[kind] for kind, _ in members if kind != "#")
    scalars = tuple(i for i, (kind, _) in enumerate(members) if kind == "#")
    return dtypes, scalars


@intrinsic(prefer_literal=True)
def unpack_group(typingctx, group, spec):
    """The members of a group as a tuple, in the order `spec` gives (a string constant).
    A tuple is returned as it is; a packed int64 array becomes views of the arrays and
    its trailing scalars.

    Kernels take their arrays in such groups. A tuple of dozens of arrays passed down a
    call chain is typed, lowered and optimised member by member at every call boundary;
    passed packed and unpacked here, inside the kernel that reads them, a group is one
    array until then, and its views cost nothing at run time."""
    if not isinstance(spec, types.StringLiteral):
        return None
    if isinstance(group, types.BaseTuple):

        def identity(context, builder, sig, args):
            return impl_ret_borrowed(context, builder, sig.return_type, args[0])

        return group(group, spec), identity
    if not (isinstance(group, types.Array) and group.ndim == 1 and group.dtype == types.int64):
        return None
    members = parse_spec(spec.literal_value)
    member_types = []
    for kind, ndim in members:
        if kind == "#":
            member_types.append(types.int64)
        else:
            member_types.append(types.Array(numba_from_dtype(np.dtype(_SPEC_DTYPES[kind])), ndim, "C"))
    tuple_type = types.Tuple(member_types)
    n_scalars = sum(1 for kind, _ in members if kind == "#")

    def codegen(context, builder, sig, args):
        entries = context.make_array(sig.args[0])(context, builder, args[0])
        shape = cgutils.unpack_tuple(builder, entries.shape)
        strides = cgutils.unpack_tuple(builder, entries.strides)

        def entry(at):
            return builder.load(cgutils.get_item_pointer2(context, builder, entries.data, shape, strides, "C", [at]))

        def constant(k):
            return context.get_constant(types.intp, k)

        values = []
        array_index = 0
        scalar_index = 0
        tail = builder.sub(shape[0], constant(n_scalars))
        for (kind, ndim), member_type in zip(members, member_types, strict=True):
            if kind == "#":
                values.append(entry(builder.add(tail, constant(scalar_index))))
                scalar_index += 1
                continue
            base = array_index * FIELDS
            dims = [entry(constant(base + 1 + d)) for d in range(ndim)]
            values.append(_make_view(context, builder, member_type, member_type.dtype, entry(constant(base)), dims))
            array_index += 1
        return context.make_tuple(builder, sig.return_type, values)

    return tuple_type(group, spec), codegen


@intrinsic
def member_2d(typingctx, group, index, dtype):
    """The 2-D array at `index` of a group: a tuple of such arrays, or their `pack` (of
    `dtype`, a compile-time constant). A kernel that loops over a model's layers reads
    each layer's matrix this way, from one packed array per group instead of a tuple
    that numba compiles member by member (see unpack_group)."""
    if isinstance(group, types.UniTuple):
        element = group.dtype

        def from_tuple(context, builder, sig, args):
            getitem = context.get_function(operator.getitem, element(group, types.intp))
            return getitem(builder, (args[0], args[1]))

        return element(group, types.intp, dtype), from_tuple
    if not (isinstance(group, types.Array) and group.ndim == 1 and group.dtype == types.int64):
        return None
    arrty = types.Array(dtype.instance_type, 2, "C")
    return arrty(group, types.intp, dtype), _view_codegen(arrty, 2)
