"""Secrets in argv and environ never survive redaction."""

from __future__ import annotations

import pytest

from bubblewatch.topology.redact import (
    REDACTED,
    env_allowed,
    is_secret_name,
    redact_argv,
    redact_env,
    redact_text,
)


@pytest.mark.parametrize(
    "name",
    [
        "--api-key",
        "--admin-api-key",
        "--hf-token",
        "--token",
        "HF_TOKEN",
        "OPENAI_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "--db-passwd",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "HUGGINGFACE_HUB_TOKEN",
        "VLLM_API_KEY",
        "--ssl-key-password",
        "MYAPIKEY",
        "ACCESSTOKEN",
    ],
)
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "--tokenizer",
        "--max-total-tokens",
        "--max-new-tokens",
        "--skip-tokenizer-init",
        "--tp-size",
        "--kv-cache-dtype",
        "--model-path",
        "PATH",
        "CUDA_VISIBLE_DEVICES",
        "NCCL_IB_HCA",
        "--ssl-keyfile",
    ],
)
def test_ordinary_names(name):
    assert not is_secret_name(name)


def test_flag_value_forms():
    argv = [
        "x",
        "--api-key",
        "abc",
        "--hf-token=def",
        "--token",
        "ghi",
        "--tokenizer",
        "t",
        "--admin-api-key",
        "--port",
        "1",
    ]
    assert redact_argv(argv) == (
        "x",
        "--api-key",
        REDACTED,
        f"--hf-token={REDACTED}",
        "--token",
        REDACTED,
        "--tokenizer",
        "t",
        "--admin-api-key",
        "--port",
        "1",
    )


@pytest.mark.parametrize(
    ("value", "secret"),
    [
        ("sk-abcdefghijklmnop0123", "sk-abcdefghijklmnop0123"),
        ("sk-proj-AbCdEf0123456789xyz", "AbCdEf0123456789xyz"),
        ("hf_AbCdEfGhIjKlMnOpQrSt", "hf_AbCdEfGhIjKlMnOpQrSt"),
        ("Authorization: Bearer abc.def-ghi_jkl0123", "abc.def-ghi_jkl0123"),
        ("https://user:s3cretpass@host.example/path", "s3cretpass"),
        ("s3://bucket/x?X-Amz-Signature=deadbeefcafe&token=qwerty123", "qwerty123"),
        ("s3://bucket/x?X-Amz-Signature=deadbeefcafe", "deadbeefcafe"),
        ('{"api_key": "plain-text-key", "n": 1}', "plain-text-key"),
        ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig", "eyJzdWIiOiIxMjM0NTY3ODkwIn0"),
        ("x9Kq2Lm7Vb3Nr8Tw1Zc5Yd4Hf6Jg0Ps", "x9Kq2Lm7Vb3Nr8Tw1Zc5Yd4Hf6Jg0Ps"),
        ("bash -c 'serve --api-key hunter2'", "hunter2"),
    ],
)
def test_credential_shaped_values(value, secret):
    out = redact_text(value)
    assert secret not in out
    assert REDACTED in out


@pytest.mark.parametrize(
    "value",
    [
        "meta-llama/Llama-3.1-70B-Instruct",
        "moonshotai/Kimi-K2-Instruct-0905-FP8-dynamic",
        "/root/.cache/huggingface/hub/models--Qwen--Qwen3-235B/snapshots/5f0b02c75b57c5855da9ae460ce51323ea669d8a",
        "GPU-00000001-1111-2222-3333-abcdef000001",
        "0.0.0.0",
        "16,16,15,14",
        "https://host:8000/metrics",
    ],
)
def test_ordinary_values_stay(value):
    assert redact_text(value) == value


def test_env_allow_list_and_secret_names():
    env = {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "SGLANG_PP_LAYER_PARTITION": "8,8",
        "NCCL_DEBUG": "INFO",
        "VLLM_API_KEY": "k",
        "PATH": "/bin",
        "HF_TOKEN": "hf_x",
        "HOME": "/root",
        "VLLM_ENDPOINT": "https://u:pw0rd@h/",
        "SGLANG_HF_TOKEN": "t",
    }
    out = redact_env(env)
    assert out == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NCCL_DEBUG": "INFO",
        "SGLANG_HF_TOKEN": REDACTED,
        "SGLANG_PP_LAYER_PARTITION": "8,8",
        "VLLM_API_KEY": REDACTED,
        "VLLM_ENDPOINT": f"https://u:{REDACTED}@h/",
    }
    assert env_allowed("NCCL_P2P_LEVEL") and not env_allowed("AWS_REGION")


def test_allow_all_still_redacts():
    out = redact_env({"HF_TOKEN": "hf_abcdefghijklmnop", "PATH": "/bin"}, allow_all=True)
    assert out == {"HF_TOKEN": REDACTED, "PATH": "/bin"}
