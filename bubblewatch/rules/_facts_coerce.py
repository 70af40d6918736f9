"""Facts shaped by the schema: defaults where nothing is known, values coerced to their types.

Every value is coerced to the type the schema gives it (ints stay ints,
measured figures are doubles, NaN is null); errors name the bad field's path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from bubblewatch.rules._schema_types import FieldType, ListOf, MapOf, Scalar, Struct
from bubblewatch.rules.errors import FactsError
from bubblewatch.rules.schema import FACTS_VERSION, SCHEMA


def default_facts_dict() -> dict[str, Any]:
    """Facts where nothing is known: every nullable field null, lists and maps empty."""
    d = default_value(SCHEMA)
    assert isinstance(d, dict)
    d["version"] = FACTS_VERSION
    d["diagnosis"].update(
        {"verdict": "insufficient_data", "confidence": 0.0, "window_s": 0.0, "n_samples": 0}
    )
    return d


def default_value(t: FieldType) -> Any:
    if isinstance(t, Struct):
        return {k: default_value(f.type) for k, f in t.fields.items()}
    if isinstance(t, MapOf):
        return {}
    if isinstance(t, ListOf):
        return None if t.nullable else []
    if not t.nullable:
        return {"bool": False, "int": 0, "double": 0.0, "string": ""}[t.kind]
    return None


def coerce(t: FieldType, v: Any, path: str, base: Any) -> Any:
    if isinstance(t, Struct):
        if not isinstance(v, Mapping):
            raise FactsError(f"{path}: expected a mapping, got {_show(v)}")
        unknown = sorted(set(v) - set(t.fields))
        if unknown:
            raise FactsError(f"{path}: unknown field {unknown[0]!r} (known: {', '.join(t.fields)})")
        out = {}
        for k, f in t.fields.items():
            sub_base = None if base is None else base[k]
            if k in v:
                out[k] = coerce(f.type, v[k], f"{path}.{k}", sub_base)
            elif base is not None:
                out[k] = sub_base
            else:
                raise FactsError(f"{path}: missing field {k!r}")
        return out
    if isinstance(t, ListOf):
        if v is None and t.nullable:
            return None
        if not isinstance(v, (list, tuple)):
            raise FactsError(f"{path}: expected a list, got {_show(v)}")
        elem_base = (
            default_value(t.elem) if base is not None and isinstance(t.elem, Struct) else None
        )
        return [coerce(t.elem, x, f"{path}[{i}]", elem_base) for i, x in enumerate(v)]
    if isinstance(t, MapOf):
        if not isinstance(v, Mapping):
            raise FactsError(f"{path}: expected a mapping, got {_show(v)}")
        return {str(k): coerce(t.value, x, f"{path}[{k!r}]", None) for k, x in v.items()}
    return _scalar(t, v, path)


def _scalar(t: Scalar, v: Any, path: str) -> Any:
    if v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v))):
        if t.nullable:
            return None
        raise FactsError(f"{path}: expected {t.kind}, got null")
    if t.kind == "bool" and isinstance(v, bool):
        return v
    if t.kind == "int" and isinstance(v, int) and not isinstance(v, bool):
        return v
    if t.kind == "int" and isinstance(v, float) and v.is_integer():
        return int(v)
    if t.kind == "double" and isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if t.kind == "string" and isinstance(v, str):
        return v
    if t.kind == "string" and isinstance(v, (int, float, bool)):
        return str(v).lower() if isinstance(v, bool) else str(v)
    raise FactsError(f"{path}: expected {t.kind}, got {_show(v)}")


def _show(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."
