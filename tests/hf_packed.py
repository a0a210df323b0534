"""A packed forward of a transformers model (tests/ is on sys.path): several sequences end to
end in one row with their cumulative lengths, as a continuous-batching prefill runs them."""

import torch


def packed_forward(model, sequences, implementation):
    """The logits (tokens, vocab) of ``sequences`` packed end to end in one forward on ``implementation``."""
    model.set_attn_implementation(implementation)
    device = next(model.parameters()).device
    lengths = [len(s) for s in sequences]
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    ids = torch.tensor([sum(sequences, [])], device=device)
    positions = torch.cat([torch.arange(n, device=device) for n in lengths])[None]
    return model(input_ids=ids, position_ids=positions, cu_seq_lens_q=cu, cu_seq_lens_k=cu,
                 max_length_q=max(lengths), max_length_k=max(lengths)).logits[0]
