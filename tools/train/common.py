"""Small helpers shared by the tools/train scripts."""
import torch

BOS_TOKEN = "<｜begin▁of▁sentence｜>"
EOS_TOKEN = "<｜end▁of▁sentence｜>"


def load_model(path, device="cpu"):
    """The checkpoint in float32 (BF16 tensors upcast exactly), eager attention and experts."""
    from transformers import DeepseekV4ForCausalLM
    kw = dict(dtype=torch.float32, attn_implementation="eager")
    try:
        model = DeepseekV4ForCausalLM.from_pretrained(path, experts_implementation="eager", **kw)
    except (TypeError, ValueError) as e:
        print("note: experts_implementation not accepted (%s); using the default" % e)
        model = DeepseekV4ForCausalLM.from_pretrained(path, **kw)
    return model.to(device).eval()
