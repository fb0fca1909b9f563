#!/usr/bin/env python3
"""Build the tiny all-zero Llama that the vLLM 0.25.1 captures used (no hub access needed).

    python3 scripts/make_tiny_model.py OUT_DIR [--max-new-tokens 128]

Every weight is 0, so all logits are equal and greedy decoding always emits token id 0
("hello"); with a prompt of repeated "hello", ngram speculative decoding accepts every draft,
so each chunk after the first carries K+1 tokens. The tokenizer is an offline WordLevel vocab
(hello=0, </s>=1 eos, <s>=2 bos, <unk>=3, then 27 more words), Whitespace pre-tokenizer,
WordPiece decoder (words joined by spaces), and a chat template that joins message contents.
generation_config.json: {"bos_token_id": 2, "eos_token_id": 1, "do_sample": false}, plus
max_new_tokens when asked for.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

WORDS = ["hello", "</s>", "<s>", "<unk>", "the", "a", "lighthouse", "keeper", "found", "map",
         "under", "stairs", "and", "sea", "was", "calm", "night", "light", "turned", "slowly",
         "over", "rocks", "ship", "came", "home", "wind", "rose", "door", "opened", "old", "story"]
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['content'] }}{% if not loop.last %} {% endif %}"
                 "{% endfor %}")


def write_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))


def write_model(out: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=1024, hidden_size=128, intermediate_size=256,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                      head_dim=64, max_position_embeddings=4096, tie_word_embeddings=False,
                      bos_token_id=2, eos_token_id=1)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    model.config.torch_dtype = torch.bfloat16
    model.save_pretrained(str(out))
    ids = torch.zeros((1, 20), dtype=torch.long)
    gen = model.generate(ids, max_new_tokens=5, do_sample=False)
    print("generate:", gen[0, 20:].tolist())


def write_generation_config(out: Path, max_new_tokens: int | None) -> None:
    gen: dict[str, object] = {"bos_token_id": 2, "eos_token_id": 1, "do_sample": False}
    if max_new_tokens is not None:
        gen["max_new_tokens"] = max_new_tokens
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--tokenizer-only", action="store_true", help="skip the weights (no torch)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if not a.tokenizer_only:
        write_model(a.out)
    write_tokenizer(a.out)
    write_generation_config(a.out, a.max_new_tokens)
    print("files:", sorted(p.name for p in a.out.iterdir()))


if __name__ == "__main__":
    main()
