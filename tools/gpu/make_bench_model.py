"""A mid-size random DeepSeek-V4 checkpoint for speed measurements (not for conformance).

V4-Flash's attention shapes (head_dim 512, RoPE 64, q_lora 1024, the indexer's 64 x 128) with a
narrower model (hidden 2048, 16 heads, 32 experts of 1024, 4 layers: CSA, HCA, sliding, CSA), saved
in bf16 with transformers' save_pretrained. Weights drawn as tools/fixtures/golden.py does (router
spread so tokens use many experts). Runs where torch + transformers are installed (the GPU machine):
    python3 tools/gpu/make_bench_model.py OUT_DIR
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fixtures"))
from golden import build  # noqa: E402

SPEC = {
    "seed": 7,
    "config": {
        "vocab_size": 32768, "hidden_size": 2048, "num_attention_heads": 16,
        "num_key_value_heads": 1, "head_dim": 512, "partial_rotary_factor": 0.125,
        "q_lora_rank": 1024, "o_groups": 4, "o_lora_rank": 512,
        "n_routed_experts": 32, "num_experts_per_tok": 6, "n_shared_experts": 1,
        "moe_intermediate_size": 1024, "sliding_window": 128,
        "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512,
        "hc_mult": 4, "hc_sinkhorn_iters": 20, "swiglu_limit": 10.0,
        "max_position_embeddings": 65536, "rms_norm_eps": 1e-6, "routed_scaling_factor": 1.5,
        "num_hidden_layers": 4,
        "layer_types": ["compressed_sparse_attention", "heavily_compressed_attention",
                        "sliding_attention", "compressed_sparse_attention"],
        "mlp_layer_types": ["moe", "moe", "moe", "moe"],
        "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
        "rope_theta": 10000.0, "compress_rope_theta": 160000.0,
    },
}


def main():
    out = sys.argv[1]
    cfg, model = build(SPEC)
    model = model.to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    print(f"wrote {out}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters")


if __name__ == "__main__":
    main()
