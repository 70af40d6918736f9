"""Build bubblewatch's engine flag tables from the engines' released sources.

    python scripts/engine_flags.py fetch sglang 0.5.7 0.5.23 --dest /tmp/flag-src/sglang
    python scripts/engine_flags.py build sglang --src /tmp/flag-src/sglang \
        -o bubblewatch/engines/sglang/flags.json

`fetch` downloads each released wheel with `pip download --no-deps`, keeps only
the Python files that define the command line (and records the wheel's name
and SHA-256), and deletes the wheel. `build` reads those files with `ast`
(nothing is imported or run) and writes one JSON table per engine: every
flag spelling, its destination, whether it takes a value, its default, its
deprecation, and the version ranges where it exists, with the file and line
that define it. Only these facts are written; no source text is copied.

Where each engine defines its flags:

- SGLang: `parser.add_argument(...)` calls in `sglang/srt/server_args.py`
  (all versions), and from 0.5.14 on also the fields annotated
  `A[type, "help"]` / `A[type, Arg(aliases=..., no_cli=...)]` of the
  configuration classes (`server_args.py`, `sglang/srt/arg_groups/**`), which
  `add_cli_args_from_dataclass` registers as `--field-name` (bool fields as
  `store_true`). argparse accepts unique prefixes (`allow_abbrev`).
- vLLM: `add_argument(...)` calls in `vllm/engine/arg_utils.py` and the
  entrypoints' `cli_args.py`/`serve.py`; a flag whose kwargs come from a
  config dataclass (`**parallel_kwargs["enforce_eager"]`) takes a value unless
  the field is a bool (`BooleanOptionalAction`: `--X` and `--no-X`). The
  frontend flags are the fields of `*FrontendArgs` classes. vLLM's parser
  also accepts `_` for `-` in flag names and `-O3` for `--optimization-level 3`.
- TensorRT-LLM: `@click.option(...)` decorators of `serve` in
  `tensorrt_llm/commands/serve.py` (`is_flag=True`: no value). Its wheels are
  not on PyPI (a stub that points to NVIDIA's index), so `build trtllm` reads
  files laid out as `SRC/VERSION/tensorrt_llm/commands/serve.py` with a
  `SOURCE` file naming where they came from.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Files each engine defines its command line in (globs inside the wheel).
KEEP = {
    "sglang": ("sglang/srt/server_args.py", "sglang/srt/arg_groups/*", "sglang/version.py"),
    "vllm": (
        "vllm/engine/arg_utils.py",
        "vllm/config/*",
        "vllm/config.py",
        "vllm/entrypoints/*cli_args.py",
        "vllm/entrypoints/cli/serve.py",
        "vllm/entrypoints/openai/api_server.py",
        "vllm/utils/argparse_utils.py",
        "vllm/utils/__init__.py",
        "vllm/utils.py",
    ),
}
PARSER = {
    "sglang": {"allow_abbrev": True, "underscores_as_dashes": False},
    "vllm": {"allow_abbrev": True, "underscores_as_dashes": True},
    "trtllm": {"allow_abbrev": False, "underscores_as_dashes": False},
}


@dataclass(frozen=True)
class Flag:
    """One spelling of one option in one version."""

    dest: str
    nargs: str  # "0" bare, "1" one value, "?", "+", "*"
    default: Any
    deprecated: bool = False
    rejected: bool = False  # registered only to stop the launch with a message
    replaced_by: str | None = None
    negatable: bool = False  # BooleanOptionalAction: --no-X too
    where: str = ""


# ---------------------------------------------------------------- versions


def version_key(text: str) -> tuple[Any, ...]:
    """Sort key for release strings (0.5.6 < 0.5.6.post2 < 0.5.7)."""
    m = re.match(r"^v?(\d+(?:\.\d+)*)(?:\.?(rc|post|dev)(\d+))?", text)
    if not m:
        return ((0,), 0, 0)
    release = tuple(int(p) for p in m.group(1).split("."))
    tag = {"dev": -2, "rc": -1, None: 0, "post": 1}[m.group(2)]
    return (release, tag, int(m.group(3) or 0))


# ---------------------------------------------------------------- fetch


def fetch(engine: str, versions: list[str], dest: Path) -> None:
    for v in versions:
        out = dest / v
        if (out / "WHEEL_SHA256").exists():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q"]
            cmd += [f"{engine}=={v}", "-d", tmp]
            if subprocess.run(cmd, check=False).returncode != 0:
                print(f"{engine} {v}: download failed", file=sys.stderr)
                continue
            wheels = sorted(Path(tmp).glob("*.whl"))
            if not wheels:
                print(f"{engine} {v}: no wheel", file=sys.stderr)
                continue
            whl = wheels[0]
            out.mkdir(parents=True, exist_ok=True)
            with zipfile.ZipFile(whl) as z:
                for name in z.namelist():
                    if name.endswith(".py") and any(
                        Path(name).match(g) or name.startswith(g.rstrip("*")) for g in KEEP[engine]
                    ):
                        z.extract(name, out)
            (out / "WHEEL_NAME").write_text(whl.name + "\n")
            digest = hashlib.sha256(whl.read_bytes()).hexdigest()
            (out / "WHEEL_SHA256").write_text(digest + "\n")
        print(f"{engine} {v}: ok", file=sys.stderr)


# ---------------------------------------------------------------- AST helpers


def _const(node: ast.AST | None) -> Any:
    """A literal's value, or a short text of the expression for anything else."""
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        text = ast.unparse(node)
        return {"expr": text if len(text) <= 80 else text[:77] + "..."}


def _string(node: ast.AST | None) -> str | None:
    if node is None:
        return None
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        if isinstance(node, ast.JoinedStr):
            return "".join(v.value for v in node.values if isinstance(v, ast.Constant))
        return None
    return value if isinstance(value, str) else None


def _name(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _kw(call: ast.Call) -> dict[str, ast.AST]:
    return {k.arg: k.value for k in call.keywords if k.arg is not None}


_REPLACED = re.compile(r"(?:[Uu]se|replaced by|instead of|in favou?r of)\s+`?(--[A-Za-z0-9_-]+)")


def _deprecation(
    action: str | None, kw: dict[str, ast.AST], help_text: str | None
) -> dict[str, Any]:
    deprecated = bool(action and "deprecat" in action.lower()) or bool(
        help_text and re.search(r"\bdeprecated\b", help_text, re.IGNORECASE)
    )
    replaced = _string(kw.get("new_flag"))
    if replaced is None and deprecated and help_text:
        m = _REPLACED.search(help_text)
        replaced = m.group(1) if m else None
    return {"deprecated": deprecated, "replaced_by": replaced}


def _nargs(action: str | None, kw: dict[str, ast.AST], *, raising_actions: set[str]) -> str:
    if "nargs" in kw:
        n = _const(kw["nargs"])
        return str(n) if not isinstance(n, dict) else "1"
    if action in ("store_true", "store_false", "store_const", "count", "help", "version"):
        return "0"
    if action and ("StoreTrue" in action or "StoreConst" in action or "BooleanOptional" in action):
        return "0"
    if action in raising_actions or action == "DeprecatedAction":
        return "0"
    return "1"


def _raising_actions(trees: list[ast.Module]) -> set[str]:
    """Action classes whose __call__ always raises (a flag that stops the launch)."""
    out: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for fn in node.body:
                if (
                    isinstance(fn, ast.FunctionDef)
                    and fn.name == "__call__"
                    and fn.body
                    and isinstance(fn.body[-1], ast.Raise)
                    and len([s for s in fn.body if not isinstance(s, ast.Expr)]) == 1
                ):
                    out.add(node.name)
    return out


def _class_defaults(trees: list[ast.Module]) -> dict[str, Any]:
    """Field defaults of every class (`tp_size: int = 1`), for `default=ServerArgs.tp_size`."""
    out: dict[str, Any] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if (
                        isinstance(stmt, ast.AnnAssign)
                        and isinstance(stmt.target, ast.Name)
                        and stmt.value is not None
                    ):
                        out.setdefault(stmt.target.id, _field_default(stmt.value))
    return out


def _field_default(node: ast.AST) -> Any:
    if isinstance(node, ast.Call) and _name(node.func) == "field":
        kw = _kw(node)
        if "default" in kw:
            return _const(kw["default"])
        if "default_factory" in kw:
            return {"expr": ast.unparse(kw["default_factory"]) + "()"}
        return None
    return _const(node)


def _add_argument_flags(
    path: str,
    tree: ast.Module,
    defaults: dict[str, Any],
    raising: set[str],
    dataclass_bools: dict[str, bool],
) -> Iterator[tuple[str, Flag]]:
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant)]
        names = [n for n in names if isinstance(n, str) and n.startswith("-")]
        if not names:
            continue
        kw = _kw(node)
        action = _name(kw.get("action"))
        help_text = _string(kw.get("help"))
        dest = _string(kw.get("dest")) or _dest_of(names)
        default = _default_of(kw.get("default"), defaults)
        # `**parallel_kwargs["enforce_eager"]`: the kind comes from the config field.
        field = _kwargs_field(node)
        negatable = False
        if action is None and field is not None and dataclass_bools.get(field):
            action = "BooleanOptionalAction"
        if action == "BooleanOptionalAction":
            negatable = True
        nargs = _nargs(action, kw, raising_actions=raising)
        rejected = action in raising or (action == "DeprecatedAction" and "error_message" in kw)
        dep = _deprecation(action, kw, help_text)
        flag = Flag(
            dest=dest,
            nargs=nargs,
            default=default,
            rejected=rejected,
            negatable=negatable,
            where=f"{path}:{node.lineno}",
            **dep,
        )
        for n in names:
            yield n, flag
        if negatable:
            for n in names:
                if n.startswith("--"):
                    yield "--no-" + n[2:], flag


def _kwargs_field(call: ast.Call) -> str | None:
    for k in call.keywords:
        if k.arg is None and isinstance(k.value, ast.Subscript):
            key = _string(k.value.slice)
            if key is not None:
                return key
    return None


def _dest_of(names: list[str]) -> str:
    long = next((n for n in names if n.startswith("--")), names[0])
    return long.lstrip("-").replace("-", "_")


def _default_of(node: ast.AST | None, defaults: dict[str, Any]) -> Any:
    if node is None:
        return None
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.attr in defaults
    ):
        return defaults[node.attr]
    return _const(node)


def _annotated_flags(path: str, tree: ast.Module) -> Iterator[tuple[str, Flag]]:
    """SGLang's `name: A[type, "help" | Arg(...)] = default` fields."""
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        for stmt in cls.body:
            if not (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(stmt.annotation, ast.Subscript)
                and _name(stmt.annotation.value) in ("A", "Annotated")
                and isinstance(stmt.annotation.slice, ast.Tuple)
            ):
                continue
            elts = stmt.annotation.slice.elts
            type_node, meta = elts[0], elts[1:]
            arg: ast.Call | None = None
            help_text: str | None = None
            for m in meta:
                if isinstance(m, ast.Call) and _name(m.func) == "Arg":
                    arg = m
                    break
                s = _string(m)
                if s is not None:
                    help_text = s
                    break
            else:
                continue  # no Arg/help: not registered on the command line
            kw = _kw(arg) if arg is not None else {}
            if arg is not None:
                if _const(kw.get("no_cli")) is True:
                    continue
                help_text = _string(kw.get("help"))
            field = stmt.target.id
            cli = _string(kw.get("cli_name")) or "--" + field.replace("_", "-")
            aliases = _const(kw.get("aliases")) if "aliases" in kw else []
            names = (
                [cli, *(a for a in aliases if isinstance(a, str))]
                if isinstance(aliases, list)
                else [cli]
            )
            action = _name(kw.get("action"))
            inner = ast.unparse(type_node)
            if action is None and re.fullmatch(r"(Optional\[)?bool\]?", inner):
                action = "store_true"
            nargs = _nargs(action, kw, raising_actions=set())
            if (
                action is None
                and re.match(r"(Optional\[)?(List|list)\[", inner)
                and "type_parser" not in kw
            ):
                nargs = _string(kw.get("nargs")) or "+"
            default = _field_default(stmt.value) if stmt.value is not None else None
            flag = Flag(
                dest=field,
                nargs=nargs,
                default=default,
                where=f"{path}:{stmt.lineno}",
                **_deprecation(action, kw, help_text),
            )
            for n in names:
                yield n, flag


def _dataclass_bools(trees: list[ast.Module]) -> dict[str, bool]:
    """vLLM config fields: True where the field is a bool (its flag is BooleanOptionalAction)."""
    out: dict[str, bool] = {}
    for tree in trees:
        for cls in ast.walk(tree):
            if isinstance(cls, ast.ClassDef):
                for stmt in cls.body:
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                        t = ast.unparse(stmt.annotation).replace(" ", "")
                        is_bool = t in ("bool", "Optional[bool]", "bool|None", "None|bool")
                        out.setdefault(stmt.target.id, is_bool)
    return out


def _frontend_flags(path: str, tree: ast.Module) -> Iterator[tuple[str, Flag]]:
    """vLLM's `*FrontendArgs` dataclass fields, registered in a loop as `--field-name`."""
    for cls in ast.walk(tree):
        if not (isinstance(cls, ast.ClassDef) and cls.name.endswith("FrontendArgs")):
            continue
        for stmt in cls.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            name = stmt.target.id
            if name.startswith("_"):
                continue
            t = ast.unparse(stmt.annotation).replace(" ", "")
            is_bool = t in ("bool", "Optional[bool]", "bool|None")
            flag = Flag(
                dest=name,
                nargs="0" if is_bool else "1",
                default=_field_default(stmt.value) if stmt.value is not None else None,
                negatable=is_bool,
                where=f"{path}:{stmt.lineno}",
            )
            yield "--" + name.replace("_", "-"), flag
            if is_bool:
                yield "--no-" + name.replace("_", "-"), flag


def _click_flags(path: str, tree: ast.Module) -> Iterator[tuple[str, Flag]]:
    """TensorRT-LLM's `@click.option("--tp_size", "--tp", ..., is_flag=True)` on `serve`."""
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef) or fn.name != "serve":
            continue
        for dec in fn.decorator_list:
            if not (isinstance(dec, ast.Call) and _name(dec.func) == "option"):
                continue
            decls = [_string(a) for a in dec.args]
            names = [d for d in decls if d and d.startswith("-")]
            plain = [d for d in decls if d and not d.startswith("-")]
            if not names:
                continue
            kw = _kw(dec)
            is_flag = _const(kw.get("is_flag")) is True
            help_text = _string(kw.get("help"))
            dest = plain[0] if plain else _dest_of(names)
            flag = Flag(
                dest=dest,
                nargs="0" if is_flag else "1",
                default=_const(kw.get("default")),
                where=f"{path}:{dec.lineno}",
                **_deprecation(None, kw, help_text),
            )
            for n in names:
                yield n, flag


# ---------------------------------------------------------------- build


def _parse(root: Path, rel: str) -> ast.Module | None:
    p = root / rel
    if not p.exists():
        return None
    try:
        return ast.parse(p.read_text(encoding="utf-8"), filename=rel)
    except SyntaxError:
        return None


def _wanted(engine: str, rel: str) -> bool:
    if engine == "sglang":
        return rel == "sglang/srt/server_args.py" or rel.startswith("sglang/srt/arg_groups/")
    if engine == "vllm":
        return rel.startswith(("vllm/config", "vllm/engine/arg_utils.py")) or (
            rel.startswith("vllm/entrypoints/")
            and rel.endswith(("cli_args.py", "cli/serve.py", "api_server.py"))
        )
    return rel.endswith("commands/serve.py")


def flags_of(engine: str, root: Path) -> dict[str, Flag]:
    """Every flag spelling one version's sources define."""
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*.py"))
    files = [f for f in files if _wanted(engine, f)]
    trees = {f: t for f in files if (t := _parse(root, f)) is not None}
    out: dict[str, Flag] = {}
    if engine == "sglang":
        cfg = [f for f in trees if f == "sglang/srt/server_args.py" or "/arg_groups/" in f]
        defaults = _class_defaults([trees[f] for f in cfg])
        raising = _raising_actions([trees[f] for f in cfg])
        for f in cfg:
            for n, flag in _annotated_flags(f, trees[f]):
                out.setdefault(n, flag)
        for f in cfg:
            for n, flag in _add_argument_flags(f, trees[f], defaults, raising, {}):
                out[n] = flag  # explicit registrations win over generated ones
    elif engine == "vllm":
        cfg = [f for f in trees if f.startswith("vllm/config")]
        bools = _dataclass_bools([trees[f] for f in cfg])
        defaults = _class_defaults([trees[f] for f in cfg])
        raising = _raising_actions(list(trees.values()))
        for f, tree in trees.items():
            if f.startswith("vllm/entrypoints/"):
                for n, flag in _frontend_flags(f, tree):
                    out.setdefault(n, flag)
        for f, tree in trees.items():
            if f.startswith(("vllm/engine/", "vllm/entrypoints/")):
                for n, flag in _add_argument_flags(f, tree, defaults, raising, bools):
                    out.setdefault(n, flag)
    else:
        for f, tree in trees.items():
            if f.endswith("commands/serve.py"):
                for n, flag in _click_flags(f, tree):
                    out.setdefault(n, flag)
    return out


def build(engine: str, src: Path) -> dict[str, Any]:
    dirs = sorted((d for d in src.iterdir() if d.is_dir()), key=lambda d: version_key(d.name))
    versions: list[dict[str, Any]] = []
    per_version: list[dict[str, Flag]] = []
    for d in dirs:
        flags = flags_of(engine, d)
        if not flags:
            print(f"{engine} {d.name}: no flags found, skipped", file=sys.stderr)
            continue
        info: dict[str, Any] = {"version": d.name, "flags": len(flags)}
        for meta, key in (
            ("WHEEL_NAME", "wheel"),
            ("WHEEL_SHA256", "sha256"),
            ("SOURCE", "source"),
        ):
            if (d / meta).exists():
                info[key] = (d / meta).read_text().strip()
        versions.append(info)
        per_version.append(flags)
    names = sorted({n for fl in per_version for n in fl})
    table: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        spans: list[dict[str, Any]] = []
        for i, flags in enumerate(per_version):
            flag = flags.get(name)
            if flag is None:
                continue
            attrs = {k: v for k, v in asdict(flag).items() if k != "where"}
            last = spans[-1] if spans else None
            if last is not None and last["_i"] == i - 1 and last["_attrs"] == attrs:
                last["_i"] = i
                last["to"] = versions[i]["version"]
                last["where_last"] = flag.where
                continue
            spans.append(
                {
                    "_i": i,
                    "_attrs": attrs,
                    "from": versions[i]["version"],
                    "to": versions[i]["version"],
                    "where_first": flag.where,
                    "where_last": flag.where,
                }
            )
        table[name] = [_span_out(s) for s in spans]
    return {
        "engine": engine,
        "generated_by": f"scripts/engine_flags.py build {engine}",
        "parser": PARSER[engine],
        "versions": versions,
        "flags": table,
    }


def _span_out(s: dict[str, Any]) -> dict[str, Any]:
    a = s["_attrs"]
    out: dict[str, Any] = {"from": s["from"], "to": s["to"], "dest": a["dest"], "nargs": a["nargs"]}
    if a["default"] is not None:
        out["default"] = a["default"]
    for k in ("deprecated", "rejected", "negatable"):
        if a[k]:
            out[k] = True
    if a["replaced_by"]:
        out["replaced_by"] = a["replaced_by"]
    out["where"] = (
        s["where_first"]
        if s["where_first"] == s["where_last"] and s["from"] == s["to"]
        else f"{s['where_first']} ({s['from']}) .. {s['where_last']} ({s['to']})"
    )
    return out


def dumps(data: dict[str, Any]) -> str:
    """JSON with one version and one flag per line (small, and diffs stay readable)."""
    head = {k: v for k, v in data.items() if k not in ("versions", "flags")}
    lines = ["{"]
    lines += [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    lines.append(' "versions": [')
    vs = [f"  {json.dumps(v, separators=(',', ':'))}" for v in data["versions"]]
    lines.append(",\n".join(vs))
    lines.append(" ],")
    lines.append(' "flags": {')
    fs = [
        f"  {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}"
        for k, v in data["flags"].items()
    ]
    lines.append(",\n".join(fs))
    lines.append(" }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="download wheels and keep the files that define flags")
    f.add_argument("engine", choices=sorted(KEEP))
    f.add_argument("versions", nargs="+")
    f.add_argument("--dest", type=Path, required=True)
    b = sub.add_parser("build", help="write the JSON flag table from fetched sources")
    b.add_argument("engine", choices=sorted(PARSER))
    b.add_argument("--src", type=Path, required=True)
    b.add_argument(
        "-o", "--out", type=Path, help="where to write it: bubblewatch/engines/ENGINE/flags.json"
    )
    args = ap.parse_args(argv)
    if args.cmd == "fetch":
        fetch(args.engine, args.versions, args.dest)
        return 0
    data = build(args.engine, args.src)
    text = dumps(data)
    if args.out:
        args.out.write_text(text)
        print(f"{args.out}: {len(data['flags'])} flags over {len(data['versions'])} versions")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
