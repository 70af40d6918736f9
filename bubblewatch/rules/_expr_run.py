"""Run a checked expression with celpy's tree walker, spending one step per visited node.

The step budget (`MAX_STEPS` by default) bounds every evaluation, macros
included; running out, like any failure inside celpy, is an `EvalError`.
Comparisons follow the current CEL spec (`x == null` is false for a known x,
ints compare with doubles). Results come back as plain Python values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import celpy
import lark
from celpy.evaluation import Activation, CELEvalError, CELUnsupportedError, Evaluator

from bubblewatch.errors import BubblewatchError
from bubblewatch.rules.errors import EvalError

MAX_STEPS = 20_000


def run(tree: lark.Tree[Any], activation: Mapping[str, Any], *, max_steps: int = MAX_STEPS) -> Any:
    """Evaluate a parse tree against CEL values; EvalError on failure or when out of steps."""
    ev = _BoundedEvaluator(tree, Activation(functions=_OPERATORS), _Budget(max_steps))
    try:
        value = ev.evaluate(dict(activation))
    except _OutOfSteps:
        raise EvalError(f"evaluation exceeded {max_steps} steps") from None
    except (CELEvalError, CELUnsupportedError) as e:
        raise EvalError(_cel_message(e)) from None
    except (RecursionError, MemoryError, OverflowError) as e:
        raise EvalError(f"evaluation aborted: {type(e).__name__}") from None
    except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError) as e:
        raise EvalError(f"{type(e).__name__}: {e}") from None
    return _to_python(value)


def _num_pair(a: Any, b: Any) -> tuple[Any, Any]:
    """Heterogeneous numeric comparison as current CEL specifies: int vs double as doubles."""
    ints = (celpy.celtypes.IntType, celpy.celtypes.UintType)
    dbl = celpy.celtypes.DoubleType
    if isinstance(a, ints) and isinstance(b, dbl):
        return dbl(float(a)), b
    if isinstance(a, dbl) and isinstance(b, ints):
        return a, dbl(float(b))
    return a, b


def _compare(name: str) -> Any:
    base = celpy.evaluation.base_functions[name]

    def op(a: Any, b: Any) -> Any:
        if a is None or b is None:
            if name == "_==_":
                return celpy.celtypes.BoolType(a is None and b is None)
            if name == "_!=_":
                return celpy.celtypes.BoolType(not (a is None and b is None))
        return base(*_num_pair(a, b))

    return op


# `x == null` is false (not an error) for a known x, and ints compare with doubles.
_OPERATORS = {n: _compare(n) for n in ("_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_")}


class _OutOfSteps(BubblewatchError):
    pass


class _Budget:
    def __init__(self, steps: int) -> None:
        self.left = steps

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise _OutOfSteps


class _BoundedEvaluator(Evaluator):
    """celpy's tree-walking evaluator, spending one step per visited node (macros share it)."""

    def __init__(self, ast: lark.Tree[Any], activation: Activation, budget: _Budget) -> None:
        super().__init__(ast, activation)
        self._budget = budget

    def _visit_tree(self, tree: lark.Tree[Any]) -> Any:
        # lark routes `visit` and `visit_children` through here: one step per node.
        self._budget.spend()
        return super()._visit_tree(tree)

    def sub_evaluator(self, ast: lark.Tree[Any]) -> Evaluator:
        return _BoundedEvaluator(ast, self.activation, self._budget)


def _cel_message(e: Exception) -> str:
    raw = e.args[0] if e.args else str(e)
    msg = str(raw)
    if "no matching overload" in msg:
        return (
            "no operator for these operand types (null in arithmetic or an ordering, "
            "or int mixed with double in arithmetic: use double(...))"
        )
    if "no such member" in msg or "no such key" in msg:
        return f"missing value: {msg}"
    return msg if len(msg) <= 200 else msg[:197] + "..."


def _to_python(v: Any) -> Any:
    """CEL values back to plain Python (bool, int, float, str, None, list, dict)."""
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, celpy.celtypes.BoolType):
        return bool(v)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    if isinstance(v, str):
        return str(v)
    if isinstance(v, Mapping):
        return {_to_python(k): _to_python(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_to_python(x) for x in v]
    return str(v)
