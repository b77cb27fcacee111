#!/usr/bin/env python3
"""Peer measurement for the decode benchmark: Hugging Face transformers' DeepseekV4ForCausalLM.

Real V4-Flash / V4-Pro shapes (shared/spec/ARCHITECTURE.md §1.1) cut to the first N layers (their
real attention and hash-MoE schedule), random bf16 weights made on the GPU, eager attention and
the model's own cache (DynamicCache, which builds the V4 sliding / CSA / HCA cache layers).
Prefills B sequences of C random tokens through the cache in chunks, runs W warm-up decode steps,
then times T steps of one token per sequence (synchronize + perf_counter around each step; a step
includes embedding, lm_head and the argmax of the next token). Prints one line and one JSON line,
and appends the JSON line to --out. Runs where torch + transformers with deepseek_v4 are installed:
    python3 tools/gpu/bench_transformers.py --model v4-flash --layers 4 --out bench.jsonl
Exits 2 with one line on stderr when transformers lacks DeepseekV4 or the layers do not fit.
"""
import argparse
import contextlib
import itertools
import json
import statistics
import sys
import time

import torch

FLASH = dict(
    vocab_size=129280, hidden_size=4096, num_attention_heads=64, num_key_value_heads=1, head_dim=512,
    partial_rotary_factor=64 / 512, q_lora_rank=1024, o_groups=8, o_lora_rank=1024, sliding_window=128,
    index_n_heads=64, index_head_dim=128, index_topk=512, n_routed_experts=256, num_experts_per_tok=6,
    n_shared_experts=1, moe_intermediate_size=2048, scoring_func="sqrtsoftplus", norm_topk_prob=True,
    routed_scaling_factor=1.5, swiglu_limit=10.0, hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6,
    rms_norm_eps=1e-6, rope_theta=10000.0, compress_rope_theta=160000.0, max_position_embeddings=1048576,
    hidden_act="silu", tie_word_embeddings=False)
SHAPES = {
    "v4-flash": FLASH,
    "v4-pro": dict(FLASH, hidden_size=7168, num_attention_heads=128, q_lora_rank=1536, o_groups=16,
                   index_topk=1024, n_routed_experts=384, moe_intermediate_size=3072, routed_scaling_factor=2.5),
}
# Release compress_ratios of the decoder layers (the trailing MTP entry dropped: no MTP here).
RATIOS = {"v4-flash": [0, 0] + [4, 128] * 20 + [4], "v4-pro": [128, 128] + [4, 128] * 29 + [4]}
LAYER_TYPE = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
# YaRN of the compressed layers; the config folds a flat dict into rope_parameters["compress"]
# (and pins attention_factor = 1), as the tiny-yarn golden fixture passes it.
YARN = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1}
GB = 1e9


def fail(msg):
    print(f"bench_transformers: {msg}", file=sys.stderr)
    sys.exit(2)


@contextlib.contextmanager
def default_dtype(dt):
    # Parameters are created in bf16 directly: an f32 model then .to(bf16) would need twice the memory.
    old = torch.get_default_dtype()
    torch.set_default_dtype(dt)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def make_config(cls, model, n):
    # Explicit layer_types / mlp_layer_types / compress_rates like tools/golden.py: the config's own
    # default schedule is not the Flash one (ARCHITECTURE §1.1 notes).
    return cls(**dict(SHAPES[model], num_hidden_layers=n, layer_types=[LAYER_TYPE[r] for r in RATIOS[model][:n]],
                      mlp_layer_types=["hash_moe" if i < 3 else "moe" for i in range(n)],
                      compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
                      rope_parameters=dict(YARN), num_nextn_predict_layers=0, use_cache=True))


def weight_bytes(cls, cfg):
    """Bytes of parameters + buffers, from a build on the meta device (allocates nothing)."""
    try:
        with torch.device("meta"), default_dtype(torch.bfloat16):
            m = cls(cfg)
        return sum(t.numel() * t.element_size() for t in itertools.chain(m.parameters(), m.buffers()))
    except Exception:  # only used for the fit check and the error message
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(SHAPES), default="v4-flash")
    ap.add_argument("--layers", type=int, default=4, help="first N layers (bf16 Flash is ~13 GB a layer)")
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=1024, help="prefill tokens per forward (eager attention memory)")
    ap.add_argument("--dtype", choices=["bf16"], default="bf16")
    ap.add_argument("--experts", default="default", help="eager|grouped_mm|batched_mm; default: transformers' choice")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="append the JSON line to this file")
    a = ap.parse_args()
    try:
        import transformers
        from transformers import DynamicCache
        from transformers.models.deepseek_v4 import DeepseekV4Config, DeepseekV4ForCausalLM
    except ImportError as e:
        fail(f"this transformers has no DeepseekV4 ({e})")
    if not torch.cuda.is_available():
        fail("no CUDA device")
    if min(a.context, a.decode, a.batch, a.chunk) < 1 or a.warmup < 0:
        fail("--context, --decode, --batch and --chunk must be >= 1, --warmup >= 0")
    if not 1 <= a.layers <= len(RATIOS[a.model]):
        fail(f"--layers must be 1..{len(RATIOS[a.model])} for {a.model}")
    cfg = make_config(DeepseekV4Config, a.model, a.layers)
    est = weight_bytes(DeepseekV4ForCausalLM, cfg)
    free, total = torch.cuda.mem_get_info()

    def too_big(phase):
        need = f"~{est / GB:.1f} GB of bf16 weights" if est else "its weights"
        return (f"out of memory ({phase}): {a.layers} layers of {a.model} need {need} plus cache and activations; "
                f"the GPU has {total / GB:.1f} GB, {free / GB:.1f} GB were free, peak reached "
                f"{torch.cuda.max_memory_allocated() / GB:.1f} GB; use fewer --layers (or a smaller --chunk/--batch)")

    if est and est > free:
        fail(too_big("before building"))
    phase = "building the model"
    try:
        # Built on the GPU (no_grad, not inference_mode: parameters must stay ordinary tensors), so
        # transformers' own init (normal, std 0.02) runs there and nothing is staged on the CPU.
        # Every parameter is bf16, the small _keep_in_fp32_modules_strict ones (mHC, norms, sinks) too.
        with torch.no_grad(), torch.device("cuda"), default_dtype(torch.bfloat16):
            model = DeepseekV4ForCausalLM(cfg)
        model.eval()
        if getattr(model.config, "_attn_implementation", None) != "eager":  # V4 is eager-only already
            if hasattr(model, "set_attn_implementation"):
                model.set_attn_implementation("eager")
            else:
                model.config._attn_implementation = "eager"
        if a.experts != "default":
            if hasattr(model, "set_experts_implementation"):
                model.set_experts_implementation(a.experts)
            else:
                model.config._experts_implementation = a.experts
        g = torch.Generator(device="cuda").manual_seed(a.seed)
        with torch.no_grad():
            # tid2eid starts as zeros: every token would send its 6 picks to expert 0 of the hash
            # layers and read one expert instead of six. Give each token K distinct random experts.
            for mod in model.modules():
                if isinstance(getattr(mod, "tid2eid", None), torch.Tensor):
                    V, K = mod.tid2eid.shape
                    E = cfg.n_routed_experts
                    mod.tid2eid.copy_(torch.rand(V, E, device="cuda", generator=g).argsort(dim=-1)[:, :K])
        weights_gb = torch.cuda.memory_allocated() / GB

        with torch.inference_mode():
            phase = f"prefill of {a.batch} x {a.context} tokens"
            cache = DynamicCache(config=model.config)
            ids = torch.randint(0, cfg.vocab_size, (a.batch, a.context), device="cuda", generator=g)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for s in range(0, a.context, a.chunk):
                out = model(input_ids=ids[:, s:s + a.chunk], past_key_values=cache, use_cache=True, logits_to_keep=1)
            torch.cuda.synchronize()
            prefill_s = time.perf_counter() - t0
            nxt = out.logits[:, -1:].argmax(-1)

            phase = "decode"

            def step(tok):
                o = model(input_ids=tok, past_key_values=cache, use_cache=True)
                return o.logits[:, -1:].argmax(-1), o.logits

            for _ in range(a.warmup):  # also extends the cache: timed steps see context C + W + i
                nxt, _ = step(nxt)
            peak_before_gb = torch.cuda.max_memory_allocated() / GB
            torch.cuda.reset_peak_memory_stats()
            times = []
            for _ in range(a.decode):
                torch.cuda.synchronize()
                t = time.perf_counter()
                nxt, logits = step(nxt)
                torch.cuda.synchronize()
                times.append((time.perf_counter() - t) * 1e3)
            finite = bool(torch.isfinite(logits).all())
    except torch.cuda.OutOfMemoryError:
        fail(too_big(phase))
    med = statistics.median(times)
    rec = dict(
        peer="transformers", model=a.model, layers=a.layers, context=a.context, decode=a.decode, batch=a.batch,
        warmup=a.warmup, chunk=a.chunk, dtype=a.dtype, seed=a.seed,
        step_ms_median=med, step_ms_mean=statistics.fmean(times), step_ms_min=min(times), step_ms_max=max(times),
        ms_per_layer=med / a.layers, tokens_per_s=a.batch / (med / 1e3), prefill_s=prefill_s,
        weights_gb=weights_gb, peak_gb=max(peak_before_gb, torch.cuda.max_memory_allocated() / GB),
        decode_peak_gb=torch.cuda.max_memory_allocated() / GB, logits_finite=finite,
        layer_types=list(cfg.layer_types), mlp_layer_types=list(cfg.mlp_layer_types),
        cache_layers=sorted({type(layer).__name__ for layer in cache.layers}),
        attn_implementation=getattr(model.config, "_attn_implementation", None),
        experts_implementation=getattr(model.config, "_experts_implementation", None),
        torch=torch.__version__, cuda=torch.version.cuda, transformers=transformers.__version__,
        gpu=torch.cuda.get_device_name(), time=time.strftime("%Y-%m-%dT%H:%M:%S"))
    print(f"transformers {transformers.__version__} {a.model} {a.layers} layers, context {a.context}, batch {a.batch}: "
          f"{med:.2f} ms/step median ({rec['step_ms_mean']:.2f} mean), {med / a.layers:.2f} ms/layer, "
          f"{rec['tokens_per_s']:.1f} tokens/s, peak {rec['peak_gb']:.1f} GB, prefill {prefill_s:.1f} s "
          f"[{rec['gpu']}, attn {rec['attn_implementation']}, experts {rec['experts_implementation']}]")
    line = json.dumps(rec)
    print(line)
    if a.out:
        with open(a.out, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
