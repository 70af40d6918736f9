"""Templates for summaries, descriptions and fix values: text with `{{ expression | format }}`.

Each placeholder is a checked expression (see `expr.py`), so a template can
name only facts that exist and can run no code. The optional format is a
Python format spec restricted to alignment, sign, width and precision up to
two digits and one of `d f e g % s` (`{{ evidence.bubble_ratio | .0% }}`).
A null value renders as `unknown`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bubblewatch.rules.errors import EvalError, ExprError
from bubblewatch.rules.expr import Expr, compile_expr

MAX_TEMPLATE_CHARS = 4000
MAX_PLACEHOLDERS = 16

_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_FORMAT = re.compile(r"^[<>^]?[+ ]?\d{0,2}(?:\.\d{1,2})?[dfeg%s]?$")
_SPLIT_FORMAT = re.compile(r"^(?P<expr>.*?[^|])\|(?P<fmt>[^|]*)$", re.DOTALL)


@dataclass(frozen=True)
class Template:
    """Literal text and placeholders, alternating: parts[0], holes[0], parts[1], ..."""

    source: str
    parts: tuple[str, ...]
    holes: tuple[tuple[Expr, str], ...]

    def render(self, activation: Mapping[str, Any]) -> str:
        out = [self.parts[0]]
        for (expr, fmt), text in zip(self.holes, self.parts[1:], strict=True):
            out.append(_format(expr.evaluate(activation), fmt, expr.source))
            out.append(text)
        return "".join(out)


def compile_template(source: str, *, params: Mapping[str, Any] | None = None) -> Template:
    """Parse a template and check each placeholder's expression; ExprError names the bad one."""
    if not isinstance(source, str):
        raise ExprError(f"template must be a string, got {type(source).__name__}")
    if len(source) > MAX_TEMPLATE_CHARS:
        raise ExprError(f"template is {len(source)} characters, the limit is {MAX_TEMPLATE_CHARS}")
    parts: list[str] = []
    holes: list[tuple[Expr, str]] = []
    pos = 0
    for m in _PLACEHOLDER.finditer(source):
        parts.append(source[pos : m.start()])
        pos = m.end()
        inner = m.group(1).strip()
        fmt = ""
        split = _SPLIT_FORMAT.match(inner)
        if split and _FORMAT.match(split["fmt"].strip()):
            inner, fmt = split["expr"].strip(), split["fmt"].strip()
        try:
            holes.append((compile_expr(inner, params=params), fmt))
        except ExprError as e:
            raise ExprError(f"in {{{{ {inner} }}}}: {e}") from None
        if len(holes) > MAX_PLACEHOLDERS:
            raise ExprError(f"template has more than {MAX_PLACEHOLDERS} placeholders")
    tail = source[pos:]
    if "{{" in tail or "}}" in tail:
        raise ExprError("unbalanced '{{' or '}}' in template")
    parts.append(tail)
    return Template(source, tuple(parts), tuple(holes))


def _format(value: Any, fmt: str, src: str) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return "unknown"
    if isinstance(value, float) and fmt.endswith("d") and value.is_integer():
        value = int(value)
    if isinstance(value, (list, dict)):
        value = ",".join(str(v) for v in value) if isinstance(value, list) else str(value)
    try:
        return format(value, fmt)
    except (ValueError, TypeError) as e:
        raise EvalError(f"cannot format {{{{ {src} }}}} with {fmt!r}: {e}") from None
