#!/usr/bin/env python3
"""Build a tiny Qwen3-Next (GDN hybrid + MoE) checkpoint with one MTP layer, no hub needed.

    python3 scripts/make_tiny_mtp_model.py OUT_DIR [--max-new-tokens 128] [--mtp-noise A]
                                           [--check]

vLLM 0.25.1 serves it with ``--speculative-config '{"method":"mtp","num_speculative_tokens":3}'``
(``qwen3_next`` -> ``Qwen3NextMTP``). Needs numpy, safetensors and tokenizers only (no torch).

Architecture (config.json, ``Qwen3NextForCausalLM``): hidden 256, 4 layers
(linear_attention x3 = Gated DeltaNet, full_attention x1 with output gate and partial RoPE),
8 experts top-2 + a shared expert in every layer, vocab 2048, one MTP layer
(``num_nextn_predict_layers = 1``, ``mtp.*`` weights: fc, pre_fc_norm_embedding,
pre_fc_norm_hidden, norm, layers.0 = a full-attention MoE layer).

The weights are written so that speculation behaves like a real model's, with acceptance that
varies step by step and per position:

* The target is a bigram chain: the embedding rows E are N(0, 1) vectors and the LM head row of
  token ``perm(i)`` is ``E[i]``, with ``perm`` one cycle through all ordinary tokens. Every layer
  has small random weights (std 0.02: the GDN, attention and MoE kernels really run and add a
  small perturbation to the residual stream), so greedy decoding after token ``t`` emits
  ``perm(t)`` with a large margin. The three special tokens (<unk>, <s>, </s>) have zero LM-head
  rows and are never generated, so no request ends early on EOS.
* The MTP layer predicts from the *embedding* of the token it is given through
  ``fc = [I + a R, 0]`` (R Gaussian, the hidden-state half zero) and an exact pass-through layer
  (o_proj and expert down-projections zero), then the shared LM head. For a fraction q of the
  tokens t (fixed by the noise ``a``), ``argmax`` still gives ``perm(t)``: the draft is right;
  for the rest it is wrong. Along the greedy chain a verify step therefore accepts the drafts up
  to the first token the MTP gets wrong: per-position acceptance about q, q^2, q^3 and chunks of
  1..4 tokens. ``--check`` prints q and the simulated chunk sizes (numpy, before any GPU).

Tokenizer: lower-casing WordLevel over the words below (English words, then generated two-syllable words),
Whitespace pre-tokenizer, WordPiece decoder (words joined by spaces), no BOS added, chat template
joining the message contents. generation_config.json: eos 2, bos 1, do_sample false, plus
``max_new_tokens`` when asked for.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

H, V, LAYERS = 256, 2048, 4
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 128
LK_HEADS, LV_HEADS, LK_DIM, LV_DIM, CONV_K = 2, 4, 128, 128, 4
EXPERTS, TOP_K, MOE_I, SHARED_I, DENSE_I = 8, 2, 128, 128, 512
SPECIAL = ["<unk>", "<s>", "</s>"]
ENGLISH = ("write a long story about lighthouse keeper who finds map the under stairs and sea "  # noqa: SIM905
           "was calm night light turned slowly over rocks ship came home wind rose door opened "
           "old hello world of to in is it that for on with as at by from this be are or an "
           "tell me one more time please . , ! ?").split()
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['content'] }}{% if not loop.last %} {% endif %}"
                 "{% endfor %}")


def vocabulary() -> list[str]:
    words = [*SPECIAL]
    for w in ENGLISH:
        if w not in words:
            words.append(w)
    cons, vows = "bdfgklmnprstvz", "aeiou"
    syll = [c + v for c in cons for v in vows]
    for a in syll:
        for b in syll:
            if len(words) >= V:
                return words
            w = a + b
            if w not in words:
                words.append(w)
    return words


def config(max_pos: int) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
        "vocab_size": V, "hidden_size": H, "intermediate_size": DENSE_I,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "hidden_act": "silu",
        "max_position_embeddings": max_pos, "initializer_range": 0.02, "rms_norm_eps": 1e-6,
        "use_cache": True, "tie_word_embeddings": False, "rope_theta": 10000.0,
        "partial_rotary_factor": 0.5, "attention_bias": False, "attention_dropout": 0.0,
        "linear_conv_kernel_dim": CONV_K, "linear_key_head_dim": LK_DIM,
        "linear_value_head_dim": LV_DIM, "linear_num_key_heads": LK_HEADS,
        "linear_num_value_heads": LV_HEADS, "decoder_sparse_step": 1,
        "moe_intermediate_size": MOE_I, "shared_expert_intermediate_size": SHARED_I,
        "num_experts_per_tok": TOP_K, "num_experts": EXPERTS, "norm_topk_prob": True,
        "output_router_logits": False, "router_aux_loss_coef": 0.001, "mlp_only_layers": [],
        "layer_types": ["linear_attention"] * (LAYERS - 1) + ["full_attention"],
        "full_attention_interval": LAYERS, "num_nextn_predict_layers": 1,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
    }


def _layer(rng: np.random.Generator, p: str, kind: str, passthrough: bool) -> dict[str, np.ndarray]:
    def n(*shape: int, std: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    out_std = 0.0 if passthrough else 0.02
    w = {f"{p}.input_layernorm.weight": np.zeros(H, np.float32),
         f"{p}.post_attention_layernorm.weight": np.zeros(H, np.float32)}
    if kind == "linear_attention":
        kd, vd = LK_HEADS * LK_DIM, LV_HEADS * LV_DIM
        a = f"{p}.linear_attn"
        w |= {f"{a}.in_proj_qkvz.weight": n(2 * kd + 2 * vd, H),
              f"{a}.in_proj_ba.weight": n(2 * LV_HEADS, H),
              f"{a}.conv1d.weight": n(2 * kd + vd, 1, CONV_K, std=0.2),
              f"{a}.dt_bias": np.ones(LV_HEADS, np.float32),
              f"{a}.A_log": np.log(rng.uniform(1, 16, LV_HEADS)).astype(np.float32),
              f"{a}.norm.weight": np.ones(LV_DIM, np.float32),
              f"{a}.out_proj.weight": n(H, vd, std=out_std)}
    else:
        a = f"{p}.self_attn"
        w |= {f"{a}.q_proj.weight": n(2 * HEADS * HEAD_DIM, H),
              f"{a}.k_proj.weight": n(KV_HEADS * HEAD_DIM, H),
              f"{a}.v_proj.weight": n(KV_HEADS * HEAD_DIM, H),
              f"{a}.o_proj.weight": n(H, HEADS * HEAD_DIM, std=out_std),
              f"{a}.q_norm.weight": np.zeros(HEAD_DIM, np.float32),
              f"{a}.k_norm.weight": np.zeros(HEAD_DIM, np.float32)}
    m = f"{p}.mlp"
    w[f"{m}.gate.weight"] = n(EXPERTS, H)
    for e in range(EXPERTS):
        w[f"{m}.experts.{e}.gate_proj.weight"] = n(MOE_I, H)
        w[f"{m}.experts.{e}.up_proj.weight"] = n(MOE_I, H)
        w[f"{m}.experts.{e}.down_proj.weight"] = n(H, MOE_I, std=out_std)
    w |= {f"{m}.shared_expert.gate_proj.weight": n(SHARED_I, H),
          f"{m}.shared_expert.up_proj.weight": n(SHARED_I, H),
          f"{m}.shared_expert.down_proj.weight": n(H, SHARED_I, std=out_std),
          f"{m}.shared_expert_gate.weight": n(1, H)}
    return w


def _rms(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)
    return out


def chain(seed: int, noise: float) -> dict[str, np.ndarray]:
    """E, the LM head, perm and the MTP's fc for a given noise level."""
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((V, H)).astype(np.float32)
    ordinary = np.arange(len(SPECIAL), V)
    order = rng.permutation(ordinary)
    perm = np.arange(V)
    perm[order] = np.roll(order, -1)         # one cycle through every ordinary token
    head = np.zeros((V, H), np.float32)
    head[perm[ordinary]] = emb[ordinary]     # row perm(i) = E[i]
    r = (rng.standard_normal((H, H)) / np.sqrt(H)).astype(np.float32)
    fc = np.zeros((H, 2 * H), np.float32)
    fc[:, :H] = np.eye(H, dtype=np.float32) + noise * r
    return {"emb": emb, "head": head, "perm": perm, "fc": fc, "order": order}


def mtp_right(c: dict[str, np.ndarray]) -> np.ndarray:
    """Per token: does the MTP layer predict perm(t) from t (pass-through layer, exact)?"""
    x = _rms(_rms(c["emb"]) @ c["fc"][:, :H].T)
    pred = np.argmax(x @ c["head"].T, axis=1)
    right: np.ndarray = pred == c["perm"]
    return right


def simulate(c: dict[str, np.ndarray], right: np.ndarray, start: int, tokens: int,
             k: int = 3) -> list[int]:
    """Chunk sizes of a greedy MTP stream of ``tokens`` tokens after token ``start``."""
    perm, t, left, chunks = c["perm"], start, tokens, []
    t = int(perm[t])                                 # prefill emits the first token
    left -= 1
    chunks.append(1)
    while left > 0:
        acc = 0
        cur = t
        while acc < k and right[cur]:
            acc += 1
            cur = int(perm[cur])
        n = min(acc + 1, left)
        for _ in range(n):
            t = int(perm[t])
        left -= n
        chunks.append(n)
    return chunks


def write_tokenizer(out: Path, words: list[str], max_len: int) -> None:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers.processors import TemplateProcessing

    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(cleanup=False)
    tok.post_processor = TemplateProcessing(single="$A", pair="$A $B")
    tok.add_special_tokens(SPECIAL)
    tok.save(str(out / "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
           "unk_token": "<unk>", "model_max_length": max_len, "add_bos_token": False,
           "add_eos_token": False, "clean_up_tokenization_spaces": False,
           "chat_template": CHAT_TEMPLATE}
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, indent=2) + "\n")


def build(out: Path, *, noise: float, seed: int, max_pos: int,
          max_new_tokens: int | None) -> dict[str, Any]:
    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=True)
    c = chain(seed, noise)
    rng = np.random.default_rng(seed + 1)
    w: dict[str, np.ndarray] = {"model.embed_tokens.weight": c["emb"],
                                "model.norm.weight": np.zeros(H, np.float32),
                                "lm_head.weight": c["head"]}
    kinds = config(max_pos)["layer_types"]
    for i in range(LAYERS):
        w |= _layer(rng, f"model.layers.{i}", kinds[i], passthrough=False)
    w |= _layer(rng, "mtp.layers.0", "full_attention", passthrough=True)
    w |= {"mtp.fc.weight": c["fc"], "mtp.norm.weight": np.zeros(H, np.float32),
          "mtp.pre_fc_norm_embedding.weight": np.zeros(H, np.float32),
          "mtp.pre_fc_norm_hidden.weight": np.zeros(H, np.float32)}
    save_file({k: np.ascontiguousarray(v) for k, v in w.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config(max_pos), indent=2) + "\n")
    gen: dict[str, Any] = {"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}
    if max_new_tokens is not None:
        gen["max_new_tokens"] = max_new_tokens
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    words = vocabulary()
    write_tokenizer(out, words, max_pos)
    right = mtp_right(c)
    ordinary = right[len(SPECIAL):]
    info = {"mtp_noise": noise, "seed": seed, "q_mtp_right": float(ordinary.mean()),
            "params": int(sum(v.size for v in w.values())),
            "perm_of": {words[i]: words[int(c["perm"][i])] for i in range(3, 8)}}
    (out / "tiny_mtp_info.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--mtp-noise", type=float, default=3.8)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--max-position", type=int, default=65536)
    ap.add_argument("--check", action="store_true",
                    help="print q and simulated chunk sizes for a few noise levels; write nothing")
    a = ap.parse_args()
    if a.check:
        for noise in (3.0, 3.6, 3.8, 4.0, 5.0):
            c = chain(a.seed, noise)
            right = mtp_right(c)
            ch = simulate(c, right, int(c["order"][0]), 256)
            acc = [sum(1 for x in ch[1:] if x > p + 1) / max(1, len(ch) - 1) for p in range(3)]
            print(f"noise {noise}: q={right[3:].mean():.3f} chunks/256={len(ch)} "
                  f"tok/chunk={256 / len(ch):.2f} sizes={np.bincount(ch).tolist()} "
                  f"pos-accept~{[round(x, 2) for x in acc]}")
        return
    info = build(a.out, noise=a.mtp_noise, seed=a.seed, max_pos=a.max_position,
                 max_new_tokens=a.max_new_tokens)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
