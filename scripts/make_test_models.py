"""Generate the tiny models of the CPU test engine (run with the engine venv's Python).

Writes, under OUT_DIR:

* ``target/``: a random-weight Llama (vocab 512, hidden 256, 4 layers, 2 KV heads) with a
  byte-level BPE tokenizer trained on a few sentences. Its final norm weight is zero, so
  every logit is equal and greedy decoding emits token 0 for ever: a target whose next
  token is known, which lets acceptance be set by construction.
* ``draft-agree/``: an EAGLE-3 draft whose final norm is zero too, so it always proposes
  token 0 and is always accepted (acceptance length = 1 + speculative tokens).
* ``draft-unrelated/``: an EAGLE-3 draft with a normal norm and token 0's lm_head row zeroed,
  so token 0 never wins its argmax and no proposal is ever accepted (acceptance length 1).

The recipe is the one recorded in FIELD_NOTES section 1. Seeded: the same files every time.

Usage: python make_test_models.py OUT_DIR
"""

import json
import random
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import ByteLevelBPETokenizer
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB = 512
HIDDEN = 256
LAYERS = 4
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 512
HEAD_DIM = HIDDEN // HEADS
SPECIALS = ["<s>", "</s>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
SENTENCES = [
    "the model serves tokens to many users while the scheduler batches requests",
    "a draft proposes tokens and the target verifies them in one step",
    "throughput rises when acceptance is high and falls when the verify step is slow",
    "clocks power links drivers and kernels all move the numbers we measure",
]


def corpus() -> list[str]:
    """The sentences plus seeded pseudo-words, enough text for 510 BPE merges."""
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 7))) for _ in range(4000)]
    return SENTENCES * 20 + [" ".join(words[i : i + 10]) for i in range(0, len(words), 10)]


def make_tokenizer(out: Path) -> None:
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus(), vocab_size=VOCAB - len(SPECIALS), min_frequency=1, show_progress=False)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer)
    # Specials are added after training so that token 0 stays an ordinary token.
    tok.add_special_tokens({"bos_token": SPECIALS[0], "eos_token": SPECIALS[1]})
    tok.chat_template = CHAT_TEMPLATE
    assert len(tok) == VOCAB, len(tok)
    tok.save_pretrained(out)


def make_target(out: Path) -> None:
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        max_position_embeddings=2048, tie_word_embeddings=False,
        bos_token_id=VOCAB - 2, eos_token_id=VOCAB - 1, torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.model.norm.weight.zero_()
    model.save_pretrained(out, safe_serialization=True)
    make_tokenizer(out)


def make_draft(out: Path, agree: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": 1,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
        "vocab_size": VOCAB,
        "draft_vocab_size": VOCAB,
        "target_hidden_size": HIDDEN,
        "eagle_aux_hidden_state_layer_ids": [1, 2, 3],
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": VOCAB - 2,
        "eos_token_id": VOCAB - 1,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape) * 0.02

    q_out, kv_out = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    lm_head = rand(VOCAB, HIDDEN)
    if not agree:
        lm_head[0].zero_()  # logit 0 is exactly 0 while 511 others are random: never the argmax
    weights = {
        "midlayer.self_attn.q_proj.weight": rand(q_out, 2 * HIDDEN),
        "midlayer.self_attn.k_proj.weight": rand(kv_out, 2 * HIDDEN),
        "midlayer.self_attn.v_proj.weight": rand(kv_out, 2 * HIDDEN),
        "midlayer.self_attn.o_proj.weight": rand(HIDDEN, q_out),
        "midlayer.mlp.gate_proj.weight": rand(INTERMEDIATE, HIDDEN),
        "midlayer.mlp.up_proj.weight": rand(INTERMEDIATE, HIDDEN),
        "midlayer.mlp.down_proj.weight": rand(HIDDEN, INTERMEDIATE),
        "midlayer.input_layernorm.weight": torch.ones(HIDDEN),
        "midlayer.hidden_norm.weight": torch.ones(HIDDEN),
        "midlayer.post_attention_layernorm.weight": torch.ones(HIDDEN),
        "fc.weight": rand(HIDDEN, 3 * HIDDEN),
        "norm.weight": torch.zeros(HIDDEN) if agree else torch.ones(HIDDEN),
        "lm_head.weight": lm_head,
        "embed_tokens.weight": rand(VOCAB, HIDDEN),
    }
    save_file({k: v.contiguous() for k, v in weights.items()}, str(out / "model.safetensors"))


def main() -> None:
    out = Path(sys.argv[1])
    torch.manual_seed(0)
    make_target(out / "target")
    make_draft(out / "draft-agree", agree=True)
    make_draft(out / "draft-unrelated", agree=False)
    print(f"test models written to {out}")


if __name__ == "__main__":
    main()
