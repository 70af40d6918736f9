"""Make the real-engine run's model and tokenizer locally: nothing is downloaded.

Run with the real-engine venv's Python (it needs torch, transformers and
tokenizers): `python make_model.py DIR`. A randomly initialised Llama, sized so
that a decode step's matrix work, not the engine's per-step overhead, fills
most of a step on one core, and a byte-level BPE tokenizer trained on a few
sentences. Deterministic (seeded), so every run serves the same model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# The model's shape, recorded in BENCHMARKS.md ("Real engine").
SHAPE = {
    "hidden_size": 768,
    "intermediate_size": 2048,
    "num_hidden_layers": 4,  # few layers: the engine compiles its forward at every start
    "num_attention_heads": 12,
    "num_key_value_heads": 12,
    "vocab_size": 2048,
    "max_position_embeddings": 1024,
}
SENTENCES = [
    "pipeline parallelism splits a model into stages that run on different devices",
    "a bubble is the time a stage waits for its input while others compute",
    "the engine schedules micro batches so that every stage has work to do",
    "telemetry shows power, activity and clocks for each device in the pipeline",
    "the quick brown fox jumps over the lazy dog while the scheduler counts tokens",
    "requests arrive, wait in a queue, run in a batch and leave with their tokens",
]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: make_model.py DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    config = LlamaConfig(**SHAPE, torch_dtype="bfloat16", bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=SHAPE["vocab_size"],
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(SENTENCES * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.save_pretrained(out)
    (out / "bubblewatch-model.json").write_text(json.dumps(SHAPE, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
