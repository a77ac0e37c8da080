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

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

# Per array: address, rows, columns (1 for 1-D arrays).
FIELDS = 3


def pack(arrays, dtypes, validate: bool = True) -> np.ndarray:
    """The addresses and shapes of `arrays`, FIELDS int64 per array. Each must be
    C-contiguous, writeable and of the dtype given for its place (the compiled reader
    assumes those); a ValueError says which is not. `validate=False` skips the checks
    for arrays that replace ones already packed with these `dtypes` (grown copies keep
    their types), which is most of the cost of packing."""
    dtypes = tuple(dtypes)
    readers = _readers.get(dtypes)
    if validate or readers is None:
        expected = _dtype_objects.get(dtypes)
        if expected is None:
            expected = _dtype_objects[dtypes] = tuple(np.dtype(d) for d in dtypes)
        ndims = []
        for i, (a, dtype) in enumerate(zip(arrays, expected, strict=False)):
            # Each new grammar's arrays are checked here, in its time to first mask: an
            # identity test of interned dtypes and one flags word per array.
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
            ndims.append(ndim)
        # Readers by each array's own kind: its dimensions too, which the dtypes leave open.
        kinds = (dtypes, tuple(ndims))
        readers = _readers_of_kinds.get(kinds)
        if readers is None:
            readers = _readers_of_kinds[kinds] = [_address_reader(a) for a in arrays]
        _readers[dtypes] = readers
    # numpy's own ways to an address (__array_interface__, .ctypes) cost 2.4 to 3.2 µs
    # an array; a compiled reader called without its dispatcher costs about 0.2.
    fields = []
    for a, read in zip(arrays, readers, strict=False):
        shape = a.shape
        fields.append(read(a))
        fields.append(shape[0])
        fields.append(shape[1] if len(shape) == 2 else 1)
    return np.array(fields, dtype=np.int64)


def repoint(packed: np.ndarray, index: int, a: np.ndarray, dtypes) -> None:
    """Entry `index` of a group packed with `dtypes` rewritten for array `a`, which
    replaces the array packed there (a grown copy: the same kind, checked by dtype)."""
    dtypes = tuple(dtypes)
    expected = _dtype_objects[dtypes][index]
    if a.dtype is not expected and a.dtype != expected:
        raise ValueError(f"array {index}: {a.dtype} replaces a {expected} array")
    shape = a.shape
    at = index * FIELDS
    packed[at] = _readers[dtypes][index](a)
    packed[at + 1] = shape[0]
    packed[at + 2] = shape[1] if len(shape) == 2 else 1


# dtypes of a group -> one address reader per place, found without typing the arrays.
_readers: dict[tuple, list] = {}
# (dtypes, dimensions) of a group -> its readers, so that checking a new group's arrays
# does not look up a reader for each.
_readers_of_kinds: dict[tuple, list] = {}
# numpy's flag bits (ndarray.flags.num) that pack requires.
_CONTIGUOUS_WRITEABLE = 0x0001 | 0x0400  # NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_WRITEABLE
_dtype_objects: dict[tuple, tuple] = {}
_reader_by_type: dict[tuple, object] = {}


@njit(cache=True)
def _address_of(a):
    return a.ctypes.data


def _address_reader(a: np.ndarray):
    key = (a.dtype.char, a.ndim)
    reader = _reader_by_type.get(key)
    if reader is None:
        import numba

        reader = _reader_by_type[key] = _address_of.compile((numba.typeof(a),))
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
