"""The selector fine-tuning command on CPU with a tiny random GPT-2 and a word-level tokenizer
built here (no hub): LoRA steps lower the loss on the answer tokens, the adapter is saved, and bad
records or a CPU without --allow-cpu are refused with a clear message."""

import json

import pytest

pytest.importorskip("peft")

from sagegraph.errors import ConfigError, SageGraphError  # noqa: E402
from sagegraph.retrieve.graphraft.finetune import FinetuneConfig, encode, finetune, read_records  # noqa: E402

Q = "MATCH (e0:Person)-[:DIRECTED]->(x:Movie) WHERE e0.id IN $e0 RETURN DISTINCT x.id AS id"
R = "MATCH (e0:Person)-[:ACTED_IN]->(x:Movie) WHERE e0.id IN $e0 RETURN DISTINCT x.id AS id"


def _records(path):
    recs = [
        {
            "messages": [
                {"role": "system", "content": "Write the query."},
                {"role": "user", "content": f"Question: {q}"},
                {"role": "assistant", "content": json.dumps({"query": a})},
            ]
        }
        for q, a in [("Which films did Ana Silva direct?", Q), ("Which films did Ben Cho act in?", R)] * 2
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return recs


def _tiny_model(d, texts):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["<unk>", "<eos>", "<pad>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>", pad_token="<pad>")
    fast.save_pretrained(d)
    GPT2LMHeadModel(
        GPT2Config(vocab_size=tok.get_vocab_size(), n_embd=32, n_layer=1, n_head=2, n_positions=256)
    ).save_pretrained(d)
    return fast


def test_lora_steps_on_cpu_lower_the_answer_loss_and_save_the_adapter(tmp_path):
    recs = _records(tmp_path / "sft.jsonl")
    texts = [m["content"] for r in recs for m in r["messages"]] + ["system: user: assistant:"]
    tok = _tiny_model(tmp_path / "tiny", texts)
    ids, labels = encode(tok, read_records(tmp_path / "sft.jsonl"), 512)[0]
    assert labels[0] == -100 and labels[-1] == ids[-1]  # only the answer is learnt
    cfg = FinetuneConfig(lr=1e-2, r=4, alpha=8, dropout=0.0, batch_size=2, max_steps=8, allow_cpu=True)
    out = finetune(tmp_path / "sft.jsonl", str(tmp_path / "tiny"), tmp_path / "adapter", cfg)
    assert out["steps"] == 8 and out["loss_last"] < out["loss_first"] and set(out["lora"]["targets"]) >= {"c_attn"}
    assert (tmp_path / "adapter" / "adapter_config.json").exists() and (tmp_path / "adapter" / "finetune.json").exists()


def test_bad_records_and_a_cpu_without_permission_are_refused(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "q"}]}\n')
    with pytest.raises(SageGraphError, match="bad.jsonl:1: messages: the last turn must be the assistant's"):
        read_records(bad)
    bad.write_text("not json\n")
    with pytest.raises(SageGraphError, match="bad.jsonl:1: not a chat record"):
        read_records(bad)
    import torch

    if not torch.cuda.is_available():
        _records(tmp_path / "sft.jsonl")
        with pytest.raises(ConfigError, match="--allow-cpu"):
            finetune(tmp_path / "sft.jsonl", "unused", tmp_path / "a", FinetuneConfig())
