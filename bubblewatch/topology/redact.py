"""Secret redaction for engine command lines and environments.

Engine command lines carry API keys and tokens. Everything read from
`/proc/PID/cmdline` or `/proc/PID/environ` passes through `redact_argv` /
`redact_env` before it is stored, logged, exported or sent. Three rules, in
order (docs/topology.md lists them):

1. a flag or variable *named* like a secret (a word of its name is key, token,
   secret, password, credential, ...) has its value replaced;
2. a value that *looks* like a credential (`sk-...`, `hf_...`, `Bearer ...`,
   AWS key ids, JWTs, the password of URL userinfo, `token=` query
   parameters, secret-named JSON fields, long high-entropy strings) is
   replaced, whatever its flag or variable is called;
3. only allow-listed environment variables are kept at all (`ENV_ALLOW`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence

REDACTED = "<redacted>"

# Words that make a flag or variable name secret. Matched against whole words
# of the name (split on - and _), so `--max-total-tokens` and `--tokenizer`
# stay readable while `--hf-token` and `OPENAI_API_KEY` do not.
_SECRET_WORDS = frozenset(
    {
        "key",
        "apikey",
        "token",
        "secret",
        "password",
        "passwd",
        "passphrase",
        "credential",
        "credentials",
        "auth",
        "authorization",
        "cookie",
        "signature",
    }
)
# Named explicitly so the rule never depends on word splitting for the usual ones.
SECRET_FLAGS = frozenset({"--api-key", "--admin-api-key", "--hf-token", "--token"})

# Environment variables worth keeping: the ones that change placement or behaviour.
ENV_ALLOW_EXACT = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "CUDA_LAUNCH_BLOCKING",
        "CUDA_MODULE_LOADING",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "NVIDIA_VISIBLE_DEVICES",
        "PYTORCH_CUDA_ALLOC_CONF",
        "OMP_NUM_THREADS",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
    }
)
ENV_ALLOW_PREFIXES = ("NCCL_", "SGLANG_", "VLLM_", "TRTLLM_", "TLLM_", "TORCH_NCCL_", "UCX_")

_URL_USERINFO = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]+)@"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_TOKEN_SHAPES = re.compile(
    r"(?:"
    r"sk-[A-Za-z0-9_-]{8,}"  # OpenAI-style keys (sk-..., sk-proj-...)
    r"|hf_[A-Za-z0-9]{8,}"  # Hugging Face tokens
    r"|gh[pousr]_[A-Za-z0-9]{16,}"  # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{16,}"
    r"|xox[abprs]-[A-Za-z0-9-]{8,}"  # Slack tokens
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"  # JWTs
    r")"
)
# name=value pairs inside a value (query strings, k=v lists) and "name": "value" in JSON.
_KV_PAIR = re.compile(r"(?P<name>[A-Za-z0-9_.-]+)(?P<sep>=)(?P<value>[^&;,\s\"']+)")
_JSON_PAIR = re.compile(r"(?P<name>\"[A-Za-z0-9_.-]+\")(?P<sep>\s*:\s*)(?P<value>\"[^\"]*\")")
_SPACED_FLAG = re.compile(r"(?P<name>--?[A-Za-z][A-Za-z0-9_-]*)(?P<sep>[ \t]+)(?P<value>[^-\s]\S*)")
_OPAQUE = re.compile(r"[A-Za-z0-9+=_-]{24,}")
_MIN_ENTROPY_BITS = 4.0
_OPAQUE_SEGMENT_LEN = 24


def is_secret_name(name: str) -> bool:
    """True for a flag or variable name that says it holds a secret."""
    stripped = name.lstrip("-")
    if f"--{stripped}" in SECRET_FLAGS:
        return True
    words = [w for w in re.split(r"[-_.]+", stripped.lower()) if w]
    if any(w in _SECRET_WORDS for w in words):
        return True
    # Joined forms: APIKEY, ACCESSTOKEN, DBPASSWORD.
    return any(w.endswith(("apikey", "token", "secret", "password")) for w in words)


def _entropy_bits(s: str) -> float:
    counts = Counter(s)
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _looks_opaque(s: str) -> bool:
    """A long run with one random-looking segment (mixed letters and digits, high entropy).

    Judged per segment between - and _ so that model names such as
    `Kimi-K2-Instruct-0905-FP8` (short word segments) stay readable.
    """
    return any(
        len(seg) >= _OPAQUE_SEGMENT_LEN
        and any(c.isdigit() for c in seg)
        and any(c.isalpha() for c in seg)
        and _entropy_bits(seg) >= _MIN_ENTROPY_BITS
        for seg in re.split(r"[-_]+", s)
    )


def redact_text(value: str) -> str:
    """Replace every credential-shaped part of one string with `<redacted>`."""
    out = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", value)
    out = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", out)
    out = _TOKEN_SHAPES.sub(REDACTED, out)
    out = _JSON_PAIR.sub(
        lambda m: (
            f'{m["name"]}{m["sep"]}"{REDACTED}"'
            if is_secret_name(m["name"].strip('"'))
            else m.group(0)
        ),
        out,
    )
    out = _SPACED_FLAG.sub(
        lambda m: f"{m['name']}{m['sep']}{REDACTED}" if is_secret_name(m["name"]) else m.group(0),
        out,
    )
    out = _KV_PAIR.sub(
        lambda m: f"{m['name']}{m['sep']}{REDACTED}" if is_secret_name(m["name"]) else m.group(0),
        out,
    )
    return _OPAQUE.sub(lambda m: REDACTED if _looks_opaque(m.group(0)) else m.group(0), out)


def redact_argv(argv: Sequence[str]) -> tuple[str, ...]:
    """Redact a command line: values of secret-named flags, and credential-shaped values.

    `--api-key X` and `--api-key=X` both lose X, even when X starts with `-`
    (`--api-key -dashsecret123`). A secret-named flag followed by a long option
    (`--x`) or one of the engines' short options (`-tp 8`) is taken as a
    boolean and nothing after it is touched. Leading `NAME=value` shell
    assignments are redacted like environment variables.
    """
    out: list[str] = []
    redact_next = False
    leading = True
    for arg in argv:
        if leading and ASSIGNMENT.match(arg):
            name, _, value = arg.partition("=")
            out.append(f"{name}={REDACTED if is_secret_name(name) else redact_text(value)}")
            continue
        leading = False
        if redact_next:
            redact_next = False
            if not _is_option_word(arg):
                out.append(REDACTED)
                continue
        if arg.startswith("-") and len(arg) > 1:
            name, eq, _ = arg.partition("=")
            if is_secret_name(name):
                if eq:
                    out.append(f"{name}={REDACTED}")
                else:
                    out.append(name)
                    redact_next = True
                continue
        out.append(redact_text(arg))
    return tuple(out)


# A leading `NAME=value` word of a command line: the shell sets NAME for the command.
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Short options of the engines' parsers (vLLM's -tp, -pp, ...; -O3), never a secret's value.
_SHORT_OPTION = re.compile(r"^-(?:tp|pp|dp|dpl|dpa|dpr|dpb|ep|q|n|r|asc|ac|cc|O)(?:\d+|[.=].*)?$")


def _is_option_word(arg: str) -> bool:
    """True for a word that is the next option rather than a secret flag's value."""
    return arg.startswith("--") or bool(_SHORT_OPTION.match(arg))


def env_allowed(name: str) -> bool:
    """True for an environment variable on the allow-list (docs/topology.md)."""
    return name in ENV_ALLOW_EXACT or name.startswith(ENV_ALLOW_PREFIXES)


def redact_env(env: Mapping[str, str], *, allow_all: bool = False) -> dict[str, str]:
    """Keep the allow-listed variables; secret-named ones keep their name only.

    With `allow_all` every variable is kept (still redacted): for a user who
    passes their own environment explicitly.
    """
    out: dict[str, str] = {}
    for name in sorted(env):
        if not allow_all and not env_allowed(name):
            continue
        out[name] = REDACTED if is_secret_name(name) else redact_text(env[name])
    return out
