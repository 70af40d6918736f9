"""`bubblewatch rules`: check rule files, run rule tests, print the facts reference."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from bubblewatch.detect.types import Verdict
from bubblewatch.rules._facts_coerce import default_facts_dict
from bubblewatch.rules.errors import RuleError
from bubblewatch.rules.evaluate import evaluate_detailed
from bubblewatch.rules.facts import facts_from_mapping
from bubblewatch.rules.loader import check_paths
from bubblewatch.rules.model import RuleSet
from bubblewatch.rules.schema import facts_markdown
from bubblewatch.rules.testing import run_test_file


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="rules_command", metavar="ACTION", required=True)
    c = sub.add_parser("check", help="check rule files: schema, expressions, templates")
    c.add_argument("paths", nargs="*", help="rule files or directories (default: the shipped set)")
    c.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    c.set_defaults(func=_check)
    t = sub.add_parser("test", help="run rule unit tests written in YAML")
    t.add_argument("files", nargs="+", help="rule test files")
    t.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    t.set_defaults(func=_test)
    f = sub.add_parser("facts", help="print the facts reference (docs/facts.md)")
    f.set_defaults(func=_facts)


def _check(args: argparse.Namespace) -> int:
    rules, errors = check_paths(args.paths or None)
    warnings = [] if errors else _smoke(rules)
    if args.json:
        out = {
            "ok": not errors,
            "files": list(rules.sources),
            "rules": len(rules),
            "errors": [_err_dict(e) for e in errors],
            "warnings": warnings,
        }
        print(json.dumps(out, indent=2))
    else:
        for e in errors:
            print(f"error: {e}", file=sys.stderr)
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)
        status = "OK" if not errors else "FAILED"
        print(
            f"{status}: {len(rules)} rules in {len(rules.sources)} file(s), "
            f"{len(errors)} error(s), {len(warnings)} warning(s)"
        )
    return 2 if errors else 0  # a bad file is bad input, like every other command's


def _smoke(rules: RuleSet) -> list[str]:
    """Evaluate every rule with each verdict and all else unknown: unguarded nulls show up here."""
    out: dict[str, str] = {}
    for v in Verdict:
        d = default_facts_dict()
        d["diagnosis"]["verdict"] = v.value
        d["diagnosis"]["verdicts"] = [v.value]
        result = evaluate_detailed(rules, facts_from_mapping(d), held_s={})
        for f in result.failures:
            out.setdefault(
                f.rule,
                f"{f.where}: rule {f.rule!r} fails when facts are unknown "
                f"(verdict {v.value}): {f.error}",
            )
    return list(out.values())


def _err_dict(e: RuleError) -> dict[str, Any]:
    return {"path": e.path, "line": e.line, "rule": e.rule, "field": e.field, "message": e.reason}


def _test(args: argparse.Namespace) -> int:
    results = [run_test_file(f) for f in args.files]
    n_cases = sum(len(r.cases) for r in results)
    n_failed = sum(1 for r in results for c in r.cases if not c.ok)
    n_broken = sum(1 for r in results if r.error)
    if args.json:
        print(
            json.dumps(
                {
                    "ok": n_failed == 0 and n_broken == 0,
                    "files": [
                        {
                            "path": r.path,
                            "error": r.error,
                            "cases": [
                                {
                                    "name": c.name,
                                    "line": c.line,
                                    "ok": c.ok,
                                    "problems": list(c.problems),
                                    "fired": list(c.fired),
                                }
                                for c in r.cases
                            ],
                        }
                        for r in results
                    ],
                },
                indent=2,
            )
        )
    else:
        for r in results:
            if r.error:
                print(f"ERROR {r.path}: {r.error}")
                continue
            for c in r.cases:
                print(f"{'ok  ' if c.ok else 'FAIL'} {r.path}:{c.line} {c.name}")
                for p in c.problems:
                    print(f"       {p}")
        print(
            f"{n_cases - n_failed} passed, {n_failed} failed"
            + (f", {n_broken} file(s) broken" if n_broken else "")
        )
    if n_broken:
        return 2  # a test file that cannot be read or run: bad input
    return 0 if n_failed == 0 else 1


def _facts(args: argparse.Namespace) -> int:
    sys.stdout.write(facts_markdown())
    return 0
