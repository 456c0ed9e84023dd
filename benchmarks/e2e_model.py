"""The end-to-end benchmark's decoder, in plain torch modules: RMSNorm, RoPE restarting in every
document, GQA attention through a swappable callable, SwiGLU, a cross-entropy head."""
from __future__ import annotations

from e2e_config import ModelShape


def build_model(torch, shape: ModelShape, device, dtype):
    """The decoder, created and initialised on `device`; `model.attention` is set per run."""
    nn, F = torch.nn, torch.nn.functional

    class RMSNorm(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return F.rms_norm(x, (x.shape[-1],), self.weight, 1e-5)

    def apply_rope(x, cos, sin):  # x [B, S, H, D]; cos/sin [B, S, 1, D/2]
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            h, d, dk = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
            self.attn_norm, self.mlp_norm = RMSNorm(h), RMSNorm(h)
            self.qkv = nn.Linear(h, d + 2 * dk, bias=False)
            self.o = nn.Linear(d, h, bias=False)
            self.gate_up = nn.Linear(h, 2 * shape.mlp, bias=False)
            self.down = nn.Linear(shape.mlp, h, bias=False)

        def forward(self, x, rope, mask, attention):
            b, s, _ = x.shape
            heads = (shape.heads, shape.kv_heads, shape.kv_heads)
            q, k, v = self.qkv(self.attn_norm(x)).view(b, s, sum(heads), shape.head_dim).split(heads, dim=2)
            # all three contiguous [B, S, H, D], as in the attention-alone timing: a compiled peer
            # then meets the strides it was compiled for and never recompiles
            q, k, v = apply_rope(q, *rope), apply_rope(k, *rope), v.contiguous()
            x = x + self.o(attention(q, k, v, mask).reshape(b, s, -1))
            gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(shape.vocab, shape.hidden)
            self.layers = nn.ModuleList(Layer() for _ in range(shape.layers))
            self.norm = RMSNorm(shape.hidden)
            self.head = nn.Linear(shape.hidden, shape.vocab, bias=False)
            self.attention = None  # a plain callable, swapped between runs

        def forward(self, ids, rope, mask, labels):
            x = self.embed(ids)
            for layer in self.layers:
                x = layer(x, rope, mask, self.attention)
            logits = self.head(self.norm(x)).float()
            return F.cross_entropy(logits.view(-1, shape.vocab), labels.view(-1), ignore_index=-100)

    with torch.device(device):  # initialising 1B parameters on the host would take seconds
        model = Decoder()
        for p in model.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)
    return model.to(dtype=dtype)


def rope_tables(torch, pos, shape: ModelShape, dtype):
    """cos/sin [B, S, 1, D/2] for per-document positions (RoPE restarts in every document)."""
    inv = 1.0 / (shape.rope_theta ** (torch.arange(0, shape.head_dim, 2, device=pos.device).float()
                                      / shape.head_dim))
    ang = pos.float()[..., None] * inv
    return ang.cos()[:, :, None, :].to(dtype), ang.sin()[:, :, None, :].to(dtype)
