"""Arrow columns encoded as the row sinks encode each tuple, column by column: what the
batch path of the built-in sinks (runtime.batch.sink) writes, byte for byte the row path's."""
from __future__ import annotations

import json
from typing import Any


def _python_values(column: Any) -> list[Any]:
    """A column's values as a row sink gets them: to_pylist, then through msgpack as the
    chunks between stages carry them (a map's pairs become lists); as they are when msgpack
    cannot carry them (a row stage would have failed on them earlier)."""
    import msgpack
    values = column.to_pylist()
    try:
        return msgpack.unpackb(msgpack.packb(values))
    except (TypeError, ValueError, OverflowError):
        return values


def python_rows(batch: Any) -> list[list[Any]]:
    columns = [_python_values(c) for c in batch.columns]
    return [list(r) for r in zip(*columns)] if columns else [[] for _ in range(batch.num_rows)]


_FLOAT_SPECIAL = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _json_column(column: Any, errors: dict[int, BaseException]) -> Any:
    """Each value of `column` as json.dumps(value, ensure_ascii=False, sort_keys=True) writes
    it (a pyarrow string array); a value json cannot encode is null, its exception in
    `errors` under its row (the first one per row is kept, as the row path raises once)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    t = column.type
    if pa.types.is_dictionary(t):
        return _json_column(column.dictionary, errors).take(column.indices) if len(column.dictionary) \
            else pa.array(["null"] * len(column), pa.string())
    if pa.types.is_null(t):
        return pa.array(["null"] * len(column), pa.string())
    if pa.types.is_integer(t) or pa.types.is_boolean(t):   # Arrow's decimal digits, true/false: json's
        return pc.fill_null(pc.cast(column, pa.string()), "null")
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        column = pc.cast(column, pa.string())
        escaped = pc.replace_substring(pc.replace_substring(column, "\\", "\\\\"), '"', '\\"')
        quoted = pc.binary_join_element_wise('"', escaped, '"', "")
        control = pc.fill_null(pc.match_substring_regex(column, r"[\x00-\x1f]"), False)
        if pc.any(control).as_py():   # json's \n, \t, \u00XX...: rare, by json itself
            rows = pc.filter(column, control).to_pylist()
            quoted = pc.replace_with_mask(quoted, control, pa.array([json.dumps(v, ensure_ascii=False) for v in rows],
                                                                    pa.string()))
        return pc.fill_null(quoted, "null")
    if t in (pa.float32(), pa.float64()):   # float.__repr__, and NaN/Infinity, as json
        reprs = []
        for v in column.to_pylist():
            if v is None:
                reprs.append("null")
            else:
                r = float.__repr__(v)
                reprs.append(_FLOAT_SPECIAL.get(r, r))
        return pa.array(reprs, pa.string())
    out: list[str | None] = []
    for i, v in enumerate(_python_values(column)):   # nested and other types: json itself
        try:
            out.append(json.dumps(v, ensure_ascii=False, sort_keys=True))
        except Exception as err:   # broad-except: what json raises for a value fails its row alone
            errors.setdefault(i, err)
            out.append(None)
    return pa.array(out, pa.string())


def json_lines(batch: Any, fields: tuple[str, ...], end: bytes) -> tuple[Any, dict[int, BaseException]]:
    """(per row, json.dumps(dict(zip(fields, values)), ensure_ascii=False, sort_keys=True)
    followed by `end`, as a pyarrow binary array, null where the row cannot be encoded;
    {row: the exception json raised for it}): JsonlSink.encode's bytes, column by column."""
    import pyarrow as pa
    import pyarrow.compute as pc
    columns = dict(zip(fields, batch.columns))   # as Tuple.as_dict: a repeated name, its last value
    errors: dict[int, BaseException] = {}
    parts: list[Any] = []
    prefix = "{"
    for name in sorted(columns):   # sort_keys; json raises for the first bad value in this order
        col_errors: dict[int, BaseException] = {}
        encoded = _json_column(columns[name], col_errors)
        for i, e in col_errors.items():
            errors.setdefault(i, e)
        parts += [prefix + json.dumps(name, ensure_ascii=False) + ": ", encoded]
        prefix = ", "
    lines = pc.binary_join_element_wise(*parts, "}" + end.decode(), "") if parts else \
        pa.array(["{}" + end.decode()] * batch.num_rows, pa.string())
    if errors:
        bad = [False] * len(lines)
        for i in errors:
            bad[i] = True
        lines = pc.if_else(pa.array(bad), pa.scalar(None, pa.string()), lines)
    return pc.cast(lines, pa.binary()), errors


def joined(lines: Any) -> bytes:
    """The non-null values of a binary array, concatenated."""
    import pyarrow as pa
    import pyarrow.compute as pc
    present = pc.drop_null(lines)
    if len(present) == 0:
        return b""
    one: Any = pa.ListArray.from_arrays(pa.array([0, len(present)], pa.int32()), present)
    joined: Any = pc.binary_join(one, b"")
    return bytes(joined[0].as_py())


def pylist_typed(column: Any) -> Any:
    """`column` with the type `pa.array(column.to_pylist())` infers (what Table.from_pylist
    gives the row sink's dicts), cast where Arrow can, inferred from Python values otherwise."""
    import pyarrow as pa
    t = column.type
    if column.null_count == len(column):
        return pa.nulls(len(column))
    if pa.types.is_dictionary(t):
        column, t = column.dictionary_decode(), t.value_type
    if pa.types.is_boolean(t) or t in (pa.int64(), pa.float64(), pa.string()):
        return column
    if (pa.types.is_signed_integer(t) or t in (pa.uint8(), pa.uint16(), pa.uint32())):
        return column.cast(pa.int64())
    if pa.types.is_floating(t):
        return column.cast(pa.float64())
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return column.cast(pa.string())
    return pa.array(_python_values(column))
