"""A `query_range` answer (a matrix) to columns, without one Python object per point.

Prometheus writes `{"status":"success","data":{"resultType":"matrix","result":
[{"metric":{...},"values":[[t,"v"],...]},...]}}`. The fast path decodes each
series' labels with `json` and hands the whole `values` array to numpy as
text (brackets and quotes stripped), so a series of any length costs two
arrays. Anything it does not expect (another layout, a bad value, an error
answer) goes to the slow path, `json.loads` of the whole answer, which says
exactly what is wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from bubblewatch.errors import InputError
from bubblewatch.limits import BOUNDED_JSON, LIMITS_DOC

FloatArray = npt.NDArray[np.float64]

_HEAD = re.compile(
    r'\s*\{\s*"status"\s*:\s*"success"\s*,\s*"data"\s*:\s*\{\s*"resultType"\s*:\s*"matrix"'
    r'\s*,\s*"result"\s*:\s*\['
)
_ITEM = re.compile(r'\s*\{\s*"metric"\s*:\s*')
_VALUES = re.compile(r'\s*,\s*"values"\s*:\s*\[')
_ITEM_END = re.compile(r"\s*\}\s*([,\]])")
_EMPTY_END = re.compile(r"\s*\]")
_STRIP = str.maketrans("", "", '[]"')


class PrometheusError(InputError):
    """Prometheus could not be reached or gave an answer bubblewatch cannot use."""


@dataclass(frozen=True)
class RangeSeries:
    """One series of a range query: its labels and (time, value) columns."""

    labels: Mapping[str, str]
    t_s: FloatArray
    values: FloatArray


def parse_matrix(body: bytes, *, where: str, query: str) -> list[RangeSeries]:
    """Every series of a `query_range` answer; PrometheusError says what is wrong with it."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None:
        fast = _fast(text)
        if fast is not None:
            return fast
    return _slow(body, where=where, query=query)


def _fast(text: str) -> list[RangeSeries] | None:
    m = _HEAD.match(text)
    if m is None:
        return None
    pos = m.end()
    if _EMPTY_END.match(text, pos):
        return []
    decoder = BOUNDED_JSON
    out: list[RangeSeries] = []
    while True:
        m = _ITEM.match(text, pos)
        if m is None:
            return None
        try:
            labels, pos = decoder.raw_decode(text, m.end())
        except (ValueError, RecursionError):  # the slow path says what is wrong
            return None
        m = _VALUES.match(text, pos)
        if m is None or not isinstance(labels, dict):
            return None
        start = m.end()
        if text.startswith("]", start):
            end, flat = start + 1, np.zeros(0)
        else:
            close = text.find("]]", start)
            if close < 0:
                return None
            try:
                flat = np.fromstring(text[start:close].translate(_STRIP), sep=",")
            except ValueError:
                return None
            end = close + 2
        if flat.size % 2:
            return None
        m = _ITEM_END.match(text, end)
        if m is None:
            return None
        pairs = flat.reshape(-1, 2)
        out.append(
            RangeSeries(
                {str(k): str(v) for k, v in labels.items()},
                np.ascontiguousarray(pairs[:, 0]),
                np.ascontiguousarray(pairs[:, 1]),
            )
        )
        if m.group(1) == "]":
            return out
        pos = m.end()


def _slow(body: bytes, *, where: str, query: str) -> list[RangeSeries]:
    data = decode_answer(body, where=where)
    if (
        not isinstance(data, dict)
        or data.get("resultType") != "matrix"
        or not isinstance(data.get("result"), list)
    ):
        kind = data.get("resultType") if isinstance(data, dict) else type(data).__name__
        raise PrometheusError(
            f"query_range answered {kind!r}, expected a matrix (query {query!r})",
            path=where,
            field="data.resultType",
        )
    return [_series(item, where=where, query=query) for item in data["result"]]


def _series(item: Any, *, where: str, query: str) -> RangeSeries:
    if not isinstance(item, dict) or not isinstance(item.get("values"), list):
        raise PrometheusError(
            f"a result without 'values' (query {query!r})", path=where, field="values"
        )
    labels = item.get("metric", {})
    try:
        pts = item["values"]
        t = np.array([float(p[0]) for p in pts], dtype=np.float64)
        v = np.array([float(p[1]) for p in pts], dtype=np.float64)
    except (TypeError, ValueError, IndexError) as e:
        raise PrometheusError(
            f'values must be [time, "number"] pairs (query {query!r}): {e}',
            path=where,
            field="values",
        ) from e
    return RangeSeries({str(k): str(x) for k, x in labels.items()}, t, v)


def decode_answer(body: bytes, *, where: str) -> Any:
    """The `data` of a successful API answer (an object, or a list for /series)."""
    try:
        doc = BOUNDED_JSON.decode(body.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise PrometheusError(
            "the answer is not JSON: is this the Prometheus server's URL?", path=where
        ) from None
    except (ValueError, RecursionError) as e:  # bounds: a 5000-digit integer, deep nesting
        what = "nests too deeply" if isinstance(e, RecursionError) else f"has {e}"
        raise PrometheusError(f"the answer {what} (see {LIMITS_DOC})", path=where) from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        err = doc.get("error") if isinstance(doc, dict) else None
        raise PrometheusError(f"query failed: {err or 'not a Prometheus API answer'}", path=where)
    data = doc.get("data")
    if not isinstance(data, (dict, list)):
        raise PrometheusError("answer without 'data'", path=where, field="data")
    return data
