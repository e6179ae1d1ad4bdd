"""LoRA fine-tuning of a selector on chat-format records (GraphRAFT's L1, graphraft.txt §4.3 and
App. A; the records come from `sagegraph graphraft export-labels`).

The paper tunes text2cypher-gemma-2-9b with 4-bit QLoRA (r 64, one epoch, lr 2e-5). This is the
same recipe without the quantisation (bitsandbytes needs CUDA): any Hugging Face causal LM, loss on
the assistant turn only, the adapter saved for serving with the user's own tooling. It runs where
a GPU is; on CPU only when asked (`allow_cpu`), which the tests do with a tiny model.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sagegraph.errors import ConfigError, SageGraphError
from sagegraph.runfiles import write_text_whole


@dataclass
class FinetuneConfig:
    epochs: float = 1.0
    lr: float = 2e-5
    r: int = 64
    alpha: int = 16
    dropout: float = 0.05
    batch_size: int = 4
    max_steps: int | None = None
    max_length: int = 1024
    seed: int = 0
    allow_cpu: bool = False


def read_records(path: Path) -> list[list[dict[str, str]]]:
    """The `messages` of each record; a line that is not a chat record is an error naming it."""
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            msgs = json.loads(line)["messages"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise SageGraphError(f"{path}:{n}: not a chat record with 'messages' ({exc})") from None
        if not msgs or msgs[-1].get("role") != "assistant":
            raise SageGraphError(f"{path}:{n}: messages: the last turn must be the assistant's (what is learnt)")
        out.append(msgs)
    if not out:
        raise SageGraphError(f"{path}: no records")
    return out


def render(tokenizer, messages: list[dict[str, str]]) -> tuple[str, str]:
    """(prompt, answer) text: the tokenizer's chat template where it has one, else role lines."""
    if getattr(tokenizer, "chat_template", None):
        prompt = tokenizer.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True)
    else:
        prompt = "".join(f"{m['role']}: {m['content']}\n" for m in messages[:-1]) + "assistant: "
    return prompt, messages[-1]["content"] + (tokenizer.eos_token or "")


def encode(tokenizer, records: list[list[dict[str, str]]], max_length: int) -> list[tuple[list[int], list[int]]]:
    """Token ids and labels (-100 over the prompt: only the answer is learnt)."""
    out = []
    for msgs in records:
        prompt, answer = render(tokenizer, msgs)
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        a = tokenizer(answer, add_special_tokens=False)["input_ids"]
        ids = (p + a)[:max_length]
        labels = ([-100] * len(p) + a)[:max_length]
        out.append((ids, labels))
    return out


def finetune(records_path: Path, model: str, out: Path, cfg: FinetuneConfig) -> dict[str, Any]:
    try:
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ConfigError(
            f"fine-tuning needs torch, transformers and peft (pip install -e '.[finetune]'): {exc}"
        ) from None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not cfg.allow_cpu:
        raise ConfigError(
            "no GPU: fine-tuning a real model on CPU would take days; pass --allow-cpu to run anyway (tests do, "
            "with a tiny model)"
        )
    torch.manual_seed(cfg.seed)
    records = read_records(records_path)
    tok = AutoTokenizer.from_pretrained(model)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token or tok.unk_token
    lm: Any = AutoModelForCausalLM.from_pretrained(
        model, torch_dtype=torch.bfloat16 if device == "cuda" else torch.float32
    )
    targets = sorted(
        {n.split(".")[-1] for n, m in lm.named_modules() if isinstance(m, torch.nn.Linear) and "lm_head" not in n}
        | {n.split(".")[-1] for n, m in lm.named_modules() if type(m).__name__ == "Conv1D"}
    )
    lm = get_peft_model(  # the LoRA-wrapped model trains in its place
        lm,
        LoraConfig(
            r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=targets, task_type="CAUSAL_LM"
        ),
    )
    lm.to(device)
    data = encode(tok, records, cfg.max_length)
    steps_per_epoch = math.ceil(len(data) / cfg.batch_size)
    total = cfg.max_steps or max(1, math.ceil(cfg.epochs * steps_per_epoch))
    opt = torch.optim.AdamW([p for p in lm.parameters() if p.requires_grad], lr=cfg.lr)
    g = torch.Generator().manual_seed(cfg.seed)
    losses: list[float] = []
    t0 = time.perf_counter()
    lm.train()
    step = 0
    while step < total:
        for idx in torch.randperm(len(data), generator=g).split(cfg.batch_size):
            if step >= total:
                break
            batch = [data[i] for i in idx.tolist()]
            width = max(len(ids) for ids, _ in batch)
            ids = torch.full((len(batch), width), tok.pad_token_id)
            labels = torch.full((len(batch), width), -100)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for j, (x, y) in enumerate(batch):
                ids[j, : len(x)] = torch.tensor(x)
                labels[j, : len(y)] = torch.tensor(y)
                mask[j, : len(x)] = 1
            loss = lm(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device)).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(float(loss.detach()))
            step += 1
    out.mkdir(parents=True, exist_ok=True)
    lm.save_pretrained(out)
    tok.save_pretrained(out)
    summary = {
        "records": len(records),
        "steps": step,
        "device": device,
        "model": model,
        "adapter": str(out),
        "seconds": round(time.perf_counter() - t0, 1),
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "lora": {"r": cfg.r, "alpha": cfg.alpha, "targets": targets},
        "lr": cfg.lr,
    }
    write_text_whole(out / "finetune.json", json.dumps({**summary, "losses": losses}, indent=1))
    return summary
