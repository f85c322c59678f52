"""ViT-Tiny/16 (timm ``vit_tiny_patch16_224``) in plain ONNX, as ``torch.onnx.export`` writes it at opset 17.

Reference: timm ``models/vision_transformer.py`` (Dosovitskiy et al., "An
Image is Worth 16x16 Words", ICLR 2021; the "tiny" size from Touvron et al.,
DeiT): patch 16, embed dim 192, depth 12, 3 heads (head dim 64), MLP ratio 4,
qkv bias, class token, learned position embedding of 1 + (S/16)^2 tokens,
LayerNorm eps 1e-6, global pool "token", head Linear 192 -> 1000.

Export-style ops:

- patch_embed.proj: Conv 16x16/16 (3 -> 192, biased), Reshape to (b, 192,
  tokens), Transpose to (b, tokens, 192); the class token is Expand-ed to the
  batch (its shape from ``Shape`` with a symbolic batch) and Concat-ed in
  front; ``Add`` the position embedding.
- each block: x + attn(norm1(x)), then x + mlp(norm2(x)), with
  LayerNormalization; attention as timm's non-fused path: qkv Linear,
  Reshape (b, n, 3, heads, 64), Transpose (2, 0, 3, 1, 4), Split + Squeeze
  (``unbind``), q * 64**-0.5, q @ k^T (MatMul of two activations), Softmax,
  @ v (MatMul of two activations), Transpose, Reshape, proj Linear; MLP fc1
  Linear, GELU as opset 17 exports it (x * 0.5 * (1 + erf(x / sqrt 2)):
  Div, Erf, Add, Mul, Mul), fc2 Linear.
- norm, Gather of token 0, head Gemm.

A Linear on (b, n, c) is MatMul with a constant (c, out) weight plus an Add
of the bias: CIM-capable (4 per block). The two attention MatMuls multiply
activations by activations: host only (2 per block). Parameters 5,717,416 at
224 as timm reports; the position embedding, and so the count, follows the
image size: 5,717,416 - (197 - (1 + (S/16)^2)) * 192.
"""

from __future__ import annotations

import numpy as np
import onnx

from cimsplit.models.graph_builder import GraphBuilder, float_output, image_input

__all__ = ["build_vit_tiny", "EMBED_DIM", "DEPTH", "HEADS", "PATCH"]

NUM_CLASSES = 1000
PATCH = 16
EMBED_DIM = 192
DEPTH = 12
HEADS = 3
HEAD_DIM = EMBED_DIM // HEADS
MLP_HIDDEN = 4 * EMBED_DIM
LN_EPS = 1e-6
RESIDUAL_SCALE = 0.3  # proj and fc2 weights shrunk, so x + f(x) keeps its variance over 24 residual adds


class _VitBuilder:
    def __init__(self, seed: int) -> None:
        self.g = GraphBuilder("vit_tiny", seed)

    def scalar(self, name: str, value: float) -> str:
        return self.g.constant(name, np.array(value, dtype=np.float32))

    def attention(self, p: str, x: str, tokens: int, batch_dim: int) -> str:
        g = self.g
        qkv = g.linear(f"{p}.qkv", x, EMBED_DIM, 3 * EMBED_DIM)
        shape = g.constant(f"{p}.reshape_shape", np.array([batch_dim, tokens, 3, HEADS, HEAD_DIM], dtype=np.int64))
        qkv = g.op("Reshape", f"{p}.reshape", [qkv, shape])
        qkv = g.op("Transpose", f"{p}.permute", [qkv], perm=[2, 0, 3, 1, 4])
        parts = g.node("Split", f"{p}.unbind", [qkv, g.constant(f"{p}.unbind_sizes", np.array([1, 1, 1], dtype=np.int64))],
                       n_outputs=3, axis=0)
        axis0 = g.constant(f"{p}.unbind_axes", np.array([0], dtype=np.int64))
        q, k, v = (g.op("Squeeze", f"{p}.unbind.{name}", [t, axis0]) for name, t in zip("qkv", parts))
        q = g.op("Mul", f"{p}.scale", [q, self.scalar(f"{p}.scale_factor", HEAD_DIM ** -0.5)])
        k_t = g.op("Transpose", f"{p}.k_transpose", [k], perm=[0, 1, 3, 2])
        attn = g.op("MatMul", f"{p}.q_matmul_k", [q, k_t])
        attn = g.op("Softmax", f"{p}.softmax", [attn], axis=-1)
        y = g.op("MatMul", f"{p}.attn_matmul_v", [attn, v])
        y = g.op("Transpose", f"{p}.transpose", [y], perm=[0, 2, 1, 3])
        merged = g.constant(f"{p}.merge_shape", np.array([batch_dim, tokens, EMBED_DIM], dtype=np.int64))
        y = g.op("Reshape", f"{p}.merge", [y, merged])
        return g.linear(f"{p}.proj", y, EMBED_DIM, EMBED_DIM, weight_scale=RESIDUAL_SCALE)

    def mlp(self, p: str, x: str) -> str:
        g = self.g
        h = g.linear(f"{p}.fc1", x, EMBED_DIM, MLP_HIDDEN)
        erf = g.op("Erf", f"{p}.act.erf", [g.op("Div", f"{p}.act.div", [h, self.scalar(f"{p}.act.sqrt2", float(np.sqrt(2.0)))])])
        erf = g.op("Add", f"{p}.act.add", [erf, self.scalar(f"{p}.act.one", 1.0)])
        h = g.op("Mul", f"{p}.act.mul_half", [g.op("Mul", f"{p}.act.mul", [h, erf]), self.scalar(f"{p}.act.half", 0.5)])
        return g.linear(f"{p}.fc2", h, MLP_HIDDEN, EMBED_DIM, weight_scale=RESIDUAL_SCALE)

    def build(self, batch: int, image_size: int, dynamic_batch: bool, seed: int) -> onnx.ModelProto:
        g = self.g
        grid = image_size // PATCH
        tokens = 1 + grid * grid
        batch_dim = -1 if dynamic_batch else batch
        x = g.conv("patch_embed.proj", "input", 3, EMBED_DIM, PATCH, PATCH, pad=0, bias=True)
        flat = g.constant("patch_embed.flatten_shape", np.array([batch_dim, EMBED_DIM, grid * grid], dtype=np.int64))
        x = g.op("Reshape", "patch_embed.flatten", [x, flat])
        x = g.op("Transpose", "patch_embed.transpose", [x], perm=[0, 2, 1])
        cls = g.embedding("cls_token", (0.02 * g.rng.standard_normal((1, 1, EMBED_DIM))).astype(np.float32))
        pos = g.embedding("pos_embed", (0.02 * g.rng.standard_normal((1, tokens, EMBED_DIM))).astype(np.float32))
        batch_of = g.op("Shape", "cls_token.batch", [x], end=1, start=0)
        expand_shape = g.op("Concat", "cls_token.shape", [batch_of, g.constant("cls_token.ones", np.array([1, 1], dtype=np.int64))], axis=0)
        x = g.op("Concat", "cat_cls", [g.op("Expand", "cls_token.expand", [cls, expand_shape]), x], axis=1)
        x = g.op("Add", "pos_embed.add", [x, pos])
        for i in range(DEPTH):
            p = f"blocks.{i}"
            x = g.op("Add", f"{p}.add1", [x, self.attention(f"{p}.attn", g.layernorm(f"{p}.norm1", x, EMBED_DIM, LN_EPS), tokens, batch_dim)])
            x = g.op("Add", f"{p}.add2", [x, self.mlp(f"{p}.mlp", g.layernorm(f"{p}.norm2", x, EMBED_DIM, LN_EPS))])
        x = g.layernorm("norm", x, EMBED_DIM, LN_EPS)
        x = g.op("Gather", "pool_token", [x, g.constant("pool_token.index", np.array(0, dtype=np.int64))], axis=1)
        g.gemm("head", x, EMBED_DIM, NUM_CLASSES, out="output")
        return g.model(
            [image_input("input", batch, image_size, dynamic_batch)],
            [float_output("output", ["batch" if dynamic_batch else batch, NUM_CLASSES])],
            doc=f"vit_tiny: timm vit_tiny_patch16_224 architecture, random weights (seed {seed}), built by cimsplit.models",
        )


def build_vit_tiny(batch: int = 1, image_size: int = 224, dynamic_batch: bool = False, seed: int = 0) -> onnx.ModelProto:
    """ViT-Tiny/16 for an image_size x image_size input (a multiple of 16)."""
    return _VitBuilder(seed).build(batch, image_size, dynamic_batch, seed)
