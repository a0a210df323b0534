"""The torch and transformers integrations: torch.ops.flashtune.flash_attention and hf_attention."""
