#!/usr/bin/env python3
"""Train a small DeepSeek-V4 (transformers' DeepseekV4ForCausalLM) on the KJV corpus.

    python3 tools/train/train.py --tokenizer tokenizer.json --data DATA --out MODEL_DIR --steps N

DATA holds train.txt and valid.txt (tools/train/make_corpus.py). Plain PyTorch: AdamW, linear
warm-up then cosine decay, gradient clipping, float32 weights with TF32 matmuls, seeded (the data
order, the initialisation and the hash-routing table come from --seed; GPU kernels may still
differ in the last bits from run to run). Every architectural feature of V4 is in the model
(see model_config()). Two training rules that the HF model does not have are added by hooks:
  * aux-loss-free load balancing of the score-routed MoE layers (DeepSeek-V3/V4): after each
    step every router's selection bias e_score_correction_bias moves by --bias-rate towards
    the under-loaded experts (sign of mean load - load);
  * the lightning indexer learns from the main attention (as in DeepSeek-V3.2's DSA): its
    scores over the compressed entries are trained with a KL loss towards the head-summed
    attention distribution of the layer's queries over the same entries (dense, causal), with
    the indexer's inputs detached so this loss only moves the indexer. The top-k choice itself
    has no gradient, so without it the indexer would stay at its random initialisation.
The checkpoint with the best validation loss is kept. It is saved with save_pretrained
(safetensors): BF16 for the matrices and embeddings, F32 for what transformers keeps in F32
(mHC, sinks, norms, compressor position biases, router biases; DeepseekV4's
_keep_in_fp32_modules_strict), int64 for the hash-routing table. --steps 0 times a few steps
first and picks the largest multiple of 50 that fits --time-budget (the log says which).
"""
import argparse
import json
import math
import os
import random
import shutil
import sys
import time

import torch

BOS, EOS = 0, 1


def model_config(vocab_size):
    return dict(
        vocab_size=vocab_size, hidden_size=256, num_attention_heads=8, num_key_value_heads=1,
        head_dim=64, partial_rotary_factor=0.25, q_lora_rank=128, o_groups=4, o_lora_rank=64,
        n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=192,
        sliding_window=64, index_n_heads=8, index_head_dim=32, index_topk=16,
        hc_mult=4, hc_sinkhorn_iters=20, swiglu_limit=10.0, max_position_embeddings=65536,
        rms_norm_eps=1e-6, routed_scaling_factor=1.5, num_hidden_layers=4,
        layer_types=["sliding_attention", "compressed_sparse_attention",
                     "heavily_compressed_attention", "compressed_sparse_attention"],
        mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
        rope_theta=10000.0, compress_rope_theta=160000.0,
        rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096,
                         "beta_fast": 32, "beta_slow": 1},
        bos_token_id=BOS, eos_token_id=EOS, tie_word_embeddings=False, attention_dropout=0.0)


def modeling():
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as M
    return M


def build_model(vocab_size, seed):
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    M = modeling()
    cfg = DeepseekV4Config(**model_config(vocab_size))
    for attr in ("_attn_implementation", "_experts_implementation"):
        try:
            setattr(cfg, attr, "eager")
        except Exception as e:  # older/newer config classes: keep their default
            print("note: could not set", attr, e)
    torch.manual_seed(seed)
    model = DeepseekV4ForCausalLM(cfg)
    print("attention / experts implementation:", getattr(model.config, "_attn_implementation", "?"),
          getattr(model.config, "_experts_implementation", "?"), flush=True)
    # Hash routing: every token id gets num_experts_per_tok distinct experts, fixed for good.
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, M.DeepseekV4HashRouter):
                V, K = mod.tid2eid.shape
                rows = torch.stack([torch.randperm(cfg.n_routed_experts, generator=g)[:K] for _ in range(V)])
                mod.tid2eid.copy_(rows)
    return cfg, model


class RouterBalance:
    """Aux-loss-free balancing: count the experts each score-routed router picks."""

    def __init__(self, model, rate):
        M = modeling()
        self.rate, self.active, self.routers, self.counts = rate, False, [], []
        for mod in model.modules():
            if isinstance(mod, M.DeepseekV4TopKRouter):
                i = len(self.routers)
                self.routers.append(mod)
                self.counts.append(None)
                mod.register_forward_hook(lambda m, a, out, i=i: self._hook(i, m, out))

    def _hook(self, i, mod, out):
        if not self.active:
            return
        idx = out[2].reshape(-1)
        c = torch.bincount(idx, minlength=mod.e_score_correction_bias.numel()).float()
        self.counts[i] = c if self.counts[i] is None else self.counts[i] + c

    @torch.no_grad()
    def update(self):
        imbalance = []
        for i, r in enumerate(self.routers):
            c = self.counts[i]
            if c is None:
                continue
            r.e_score_correction_bias += self.rate * torch.sign(c.mean() - c)
            imbalance.append(float(c.max() / c.mean()))
            self.counts[i] = None
        return imbalance  # max load / mean load per router (1 = perfect)


class IndexerDistill:
    """KL(main attention over compressed entries || softmax(indexer scores)) on CSA layers."""

    def __init__(self, model, cfg):
        M = modeling()
        self.M, self.cfg, self.model = M, cfg, model
        self.active = False
        self.m = cfg.compress_rates["compressed_sparse_attention"]
        self.q, self.ckv, self.scores = {}, {}, {}
        self.layers = []
        for li, layer in enumerate(model.model.layers):
            if cfg.layer_types[li] != "compressed_sparse_attention":
                continue
            attn = layer.self_attn
            comp = attn.compressor
            self.layers.append(li)
            comp.indexer.register_forward_pre_hook(self._detach_inputs, with_kwargs=True)
            comp.indexer.scorer.register_forward_hook(lambda m, a, o, li=li: self._put(self.scores, li, o))
            attn.q_b_norm.register_forward_hook(lambda m, a, o, li=li: self._put(self.q, li, o))
            comp.register_forward_hook(lambda m, a, o, li=li: self._put(self.ckv, li, o[0]))

    def _detach_inputs(self, mod, args, kwargs):
        if not self.active:
            return None
        d = lambda x: x.detach() if torch.is_tensor(x) and x.is_floating_point() else x
        return tuple(d(a) for a in args), {k: d(v) for k, v in kwargs.items()}

    def _put(self, store, li, value):
        if self.active:
            store[li] = value

    def loss(self):
        total, n = None, 0
        for li in self.layers:
            q, ckv, sc = self.q.pop(li, None), self.ckv.pop(li, None), self.scores.pop(li, None)
            if q is None or ckv is None or sc is None or ckv.shape[2] == 0:
                continue
            S = sc.shape[1]
            if q.shape[1] == S and q.shape[2] == self.cfg.num_attention_heads:
                q = q.transpose(1, 2)  # [B,S,H,hd] -> [B,H,S,hd]
            B, H, S, hd = q.shape
            T = ckv.shape[2]
            dev = q.device
            valid = torch.arange(T, device=dev)[None, :] < ((torch.arange(S, device=dev) + 1) // self.m)[:, None]
            rows = valid.any(-1)
            with torch.no_grad():
                pos = torch.arange(S, device=dev)[None].expand(B, -1)
                cos, sin = self.model.model.rotary_emb(q, position_ids=pos, layer_type="compress")
                qr = self.M.apply_rotary_pos_emb(q, cos, sin)
                logits = torch.matmul(qr.float(), ckv.float().transpose(-1, -2)) * hd ** -0.5  # [B,H,S,T]
                logits = logits.masked_fill(~valid, float("-inf"))[:, :, rows]
                target = torch.softmax(logits, dim=-1).mean(1)  # [B,S',T]
            v = valid[rows]
            logp = torch.log_softmax(sc[:, rows].float().masked_fill(~v, float("-inf")), dim=-1)
            kl = (target * (torch.log(target.clamp_min(1e-12)) - logp.masked_fill(~v, 0.0))).sum(-1).mean()
            total = kl if total is None else total + kl
            n += 1
        return total / n if n else None


def load_stream(tok, path):
    text = open(path, encoding="utf-8").read()
    enc = tok.encode(text, add_special_tokens=False)
    ids = torch.tensor(enc.ids, dtype=torch.long)
    starts = [i for i, (s, e) in enumerate(enc.offsets)
              if (s == 0 or text[s - 1] == "\n") and text[s:e].strip()]
    return ids, torch.tensor(starts, dtype=torch.long)


def get_batch(stream, starts, B, T, gen):
    """Half the rows: BOS + text from a line start; half: text from anywhere (no BOS)."""
    n = len(stream)
    x = torch.empty(B, T, dtype=torch.long)
    for b in range(B):
        if torch.rand((), generator=gen).item() < 0.5:
            s = int(starts[torch.randint(len(starts), (), generator=gen)])
            s = min(s, n - T)
            x[b, 0] = BOS
            x[b, 1:] = stream[s:s + T - 1]
        else:
            s = int(torch.randint(n - T, (), generator=gen))
            x[b] = stream[s:s + T]
    return x


def valid_windows(stream, T):
    rows = []
    for s in range(0, len(stream) - (T - 1) + 1, T - 1):
        rows.append(torch.cat([torch.tensor([BOS]), stream[s:s + T - 1]]))
    return torch.stack(rows)


@torch.no_grad()
def evaluate(model, windows, device, bs=16):
    model.eval()
    tot, n = 0.0, 0
    for i in range(0, len(windows), bs):
        x = windows[i:i + bs].to(device)
        out = model(input_ids=x, labels=x, use_cache=False)
        k = x.numel() - x.shape[0]
        tot += float(out.loss) * k
        n += k
    model.train()
    return tot / n


def lr_at(step, total, peak, warmup, min_frac):
    if step < warmup:
        return peak * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * p)))


def make_optimizer(model, lr, wd):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.ndim >= 2 and "position_bias" not in name else no_decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=torch.cuda.is_available())


def train_step(model, opt, x, kl_w, distill, balance, lr, clip):
    for gparam in opt.param_groups:
        gparam["lr"] = lr
    distill.active = balance.active = True
    out = model(input_ids=x, labels=x, use_cache=False)
    distill.active = balance.active = False
    loss = out.loss
    kl = distill.loss()
    total = loss + kl_w * kl if kl is not None else loss
    opt.zero_grad(set_to_none=True)
    total.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    imb = balance.update()
    return loss.detach(), (kl.detach() if kl is not None else None), gn, imb


def cast_for_save(model):
    """BF16 everywhere except what transformers keeps in F32 for this model."""
    keep = set(getattr(model, "_keep_in_fp32_modules_strict", None) or [])
    kept = []
    for name, p in model.named_parameters():
        if any(part in keep for part in name.split(".")):
            kept.append(name)
            continue
        p.data = p.data.to(torch.bfloat16)
    return kept


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1611)
    ap.add_argument("--steps", type=int, default=0, help="0: pick from --time-budget")
    ap.add_argument("--max-steps", type=int, default=1500)
    ap.add_argument("--time-budget", type=float, default=270.0, help="seconds of training (with --steps 0)")
    ap.add_argument("--hard-limit", type=float, default=0.0,
                    help="stop training after this many seconds whatever --steps says (0: never)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--indexer-kl", type=float, default=1.0)
    ap.add_argument("--bias-rate", type=float, default=1e-3)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--smoke", action="store_true", help="a few tiny steps, to test the pipeline")
    args = ap.parse_args()

    from tokenizers import Tokenizer
    from transformers import GenerationConfig

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    tok = Tokenizer.from_file(args.tokenizer)
    V = tok.get_vocab_size(with_added_tokens=True)
    train_ids, train_starts = load_stream(tok, os.path.join(args.data, "train.txt"))
    valid_ids, _ = load_stream(tok, os.path.join(args.data, "valid.txt"))
    T, B = args.seq, args.batch
    vwin = valid_windows(valid_ids, T)
    if args.smoke:
        vwin = vwin[:2]
    print(f"vocab {V}; train tokens {len(train_ids)} ({len(train_starts)} line starts); "
          f"valid tokens {len(valid_ids)} ({len(vwin)} windows of {T})", flush=True)

    def fresh():
        cfg, model = build_model(V, args.seed)
        model.to(device).train()
        return cfg, model, make_optimizer(model, args.lr, args.wd), RouterBalance(model, args.bias_rate), \
            IndexerDistill(model, cfg)

    steps, calib = args.steps, None
    if steps <= 0:
        # Time a few steps on a throw-away copy, then start again from the seed.
        cfg, model, opt, bal, dis = fresh()
        g = torch.Generator().manual_seed(args.seed + 99)
        times = []
        for i in range(8):
            x = get_batch(train_ids, train_starts, B, T, g).to(device)
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.time()
            train_step(model, opt, x, args.indexer_kl, dis, bal, 1e-4, args.clip)
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.time() - t0)
        per_step = sorted(times[3:])[len(times[3:]) // 2]
        steps = int(args.time_budget / (per_step * 1.08)) // 50 * 50
        steps = max(50, min(args.max_steps, steps))
        calib = {"seconds_per_step": per_step, "chosen_steps": steps}
        print(f"calibration: {per_step:.3f} s/step -> --steps {steps}", flush=True)
        del model, opt, bal, dis
        if device == "cuda":
            torch.cuda.empty_cache()

    cfg, model, opt, bal, dis = fresh()
    nparams = sum(p.numel() for p in model.parameters())
    print(f"parameters: {nparams} ({nparams / 1e6:.2f} M); steps {steps}; batch {B}x{T}", flush=True)
    gen = torch.Generator().manual_seed(args.seed + 7)
    warmup = min(args.warmup, max(1, steps // 10))
    log = {"args": vars(args), "steps": steps, "calibration": calib, "params": nparams,
           "train_tokens": len(train_ids), "valid_tokens": len(valid_ids), "history": [], "evals": []}
    best = (float("inf"), None, -1)
    t_start = time.time()
    acc = {"loss": 0.0, "kl": 0.0, "n": 0}
    hard_limit = args.hard_limit if args.hard_limit > 0 else float("inf")
    stopped_early = False
    for step in range(steps):
        lr = lr_at(step, steps, args.lr, warmup, args.min_lr_frac)
        x = get_batch(train_ids, train_starts, B, T, gen).to(device, non_blocking=True)
        loss, kl, gn, imb = train_step(model, opt, x, args.indexer_kl, dis, bal, lr, args.clip)
        if step == 0 and kl is None and dis.layers:
            print("warning: the indexer distillation produced no loss", flush=True)
        acc["loss"] += float(loss)
        acc["kl"] += float(kl) if kl is not None else 0.0
        acc["n"] += 1
        last = step == steps - 1
        if (step + 1) % 10 == 0 or last or args.smoke:
            el = time.time() - t_start
            rec = {"step": step + 1, "lr": lr, "loss": acc["loss"] / acc["n"], "indexer_kl": acc["kl"] / acc["n"],
                   "grad_norm": float(gn), "router_max_over_mean": [round(v, 3) for v in imb],
                   "seconds": round(el, 1)}
            log["history"].append(rec)
            print(json.dumps(rec), flush=True)
            acc = {"loss": 0.0, "kl": 0.0, "n": 0}
        if (step + 1) % args.eval_every == 0 or last:
            vl = evaluate(model, vwin, device)
            log["evals"].append({"step": step + 1, "valid_loss": vl, "valid_ppl": math.exp(vl)})
            print(f"step {step + 1}: valid loss {vl:.4f} (ppl {math.exp(vl):.2f})", flush=True)
            if vl < best[0]:
                best = (vl, {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}, step + 1)
        if time.time() - t_start > hard_limit:
            print(f"stopping early at step {step + 1}: over the hard time limit", flush=True)
            stopped_early = True
            break
    train_seconds = time.time() - t_start
    model.load_state_dict(best[1])
    log.update({"train_seconds": round(train_seconds, 1), "best_step": best[2], "best_valid_loss": best[0],
                "stopped_early": stopped_early})
    print(f"trained {train_seconds:.0f} s; keeping step {best[2]} (valid loss {best[0]:.4f})", flush=True)

    # Save: BF16 + F32 (see the docstring), tokenizer, generation defaults, the training log.
    model = model.to("cpu").eval()
    kept = cast_for_save(model)
    model.generation_config = GenerationConfig(bos_token_id=BOS, eos_token_id=EOS, do_sample=True,
                                               temperature=0.8, top_k=40, top_p=0.95)
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    model.save_pretrained(args.out, safe_serialization=True)
    shutil.copy(args.tokenizer, os.path.join(args.out, "tokenizer.json"))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<｜begin▁of▁sentence｜>",
                   "eos_token": "<｜end▁of▁sentence｜>", "pad_token": "<｜▁pad▁｜>",
                   "add_bos_token": False, "add_eos_token": False, "model_max_length": 65536,
                   "clean_up_tokenization_spaces": False}, f, indent=1, ensure_ascii=False)
    log["kept_in_f32"] = kept
    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump(log, f, indent=1)
    print("saved", args.out, sorted(os.listdir(args.out)), flush=True)


if __name__ == "__main__":
    main()
