"""ViT-Tiny/16 builder: timm's vit_tiny_patch16_224, attention with weight and activation MatMuls."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from _zoo_helpers import assert_sane, inferred_shapes, initializer, inspect_json, op_counts, run

from cimsplit.errors import CimsplitError
from cimsplit.models import zoo
from cimsplit.models.vit import DEPTH

PUBLISHED_224 = 5_717_416  # timm vit_tiny_patch16_224


@pytest.fixture(scope="module")
def vit_32() -> onnx.ModelProto:
    return zoo.build("vit_tiny", image_size=32)  # 2 x 2 patches + the class token: 5 tokens


def test_vit_structure(vit_32: onnx.ModelProto) -> None:
    counts = op_counts(vit_32)
    assert DEPTH == 12
    assert counts["Conv"] == 1  # patch embedding 16x16/16
    assert counts["LayerNormalization"] == 2 * DEPTH + 1
    # per block 4 Linear (qkv, proj, fc1, fc2) as MatMul + bias Add, and 2 activation MatMuls (q @ k^T, attn @ v)
    assert counts["MatMul"] == 6 * DEPTH and counts["Softmax"] == DEPTH and counts["Erf"] == DEPTH
    # bias Adds, 2 residual Adds and GELU's 1 + erf per block; the position embedding
    assert counts["Add"] == (4 + 2 + 1) * DEPTH + 1
    assert counts["Gemm"] == 1 and counts["Gather"] == 1  # head on the class token
    qkv = initializer(vit_32, "blocks.0.attn.qkv.weight")
    assert qkv.shape == (192, 3 * 192)  # W^T of Linear(192, 576), as the exporter folds it
    assert initializer(vit_32, "blocks.11.mlp.fc1.weight").shape == (192, 768)
    assert initializer(vit_32, "pos_embed").shape == (1, 1 + 2 * 2, 192)


def test_vit_shapes_at_224() -> None:
    shapes = inferred_shapes(zoo.build("vit_tiny"))
    assert shapes["patch_embed.transpose_out"] == [1, 196, 192]  # 14 x 14 patches
    assert shapes["pos_embed.add_out"] == [1, 197, 192]
    assert shapes["blocks.0.attn.permute_out"] == [3, 1, 3, 197, 64]  # (q/k/v, batch, heads, tokens, head dim)
    assert shapes["blocks.0.attn.q_matmul_k_out"] == [1, 3, 197, 197]
    assert shapes["blocks.11.add2_out"] == [1, 197, 192]
    assert shapes["output"] == [1, 1000]


def test_vit_parameter_count_matches_timm(vit_32: onnx.ModelProto) -> None:
    assert zoo.parameter_count(zoo.build("vit_tiny")) == PUBLISHED_224
    # patch 3*16*16*192 + 192, class token 192, position 197*192, 12 blocks of 444,864, norm 384, head 193,000
    block = 2 * 384 + (192 * 576 + 576) + (192 * 192 + 192) + (192 * 768 + 768) + (768 * 192 + 192)
    assert 147_648 + 192 + 197 * 192 + 12 * block + 384 + 193_000 == PUBLISHED_224
    # the position embedding follows the image size: 5 tokens at 32 px instead of 197
    assert zoo.parameter_count(vit_32) == PUBLISHED_224 - (197 - 5) * 192


def test_vit_runs_with_a_dynamic_batch() -> None:
    model = zoo.build("vit_tiny", image_size=32, dynamic_batch=True)
    onnx.checker.check_model(model, full_check=True)
    (logits,) = run(model, batch=2)
    assert logits.shape == (2, 1000) and logits.dtype == np.float32
    assert_sane(logits)
    (single,) = run(zoo.build("vit_tiny", image_size=32))
    np.testing.assert_allclose(single[0], logits[0], rtol=1e-4, atol=1e-5)  # the first image of the same seeded batch


def test_vit_needs_a_multiple_of_16() -> None:
    with pytest.raises(CimsplitError, match="divisible by 16"):
        zoo.build("vit_tiny", image_size=40)


def test_vit_attention_matmuls_are_not_cim_capable(vit_32: onnx.ModelProto, tmp_path: Path) -> None:
    doc = inspect_json(vit_32, tmp_path)
    matmuls = [op for op in doc["operators"] if op["op_type"] == "MatMul"]
    weight = [op for op in matmuls if op["cim_capable"]]
    activation = [op for op in matmuls if not op["cim_capable"]]
    assert len(weight) == 4 * DEPTH and len(activation) == 2 * DEPTH
    assert {op["name"].split(".")[-1] for op in activation} == {"q_matmul_k", "attn_matmul_v"}
    assert all(len(op["nodes"]) == 2 and op["nodes"][1].endswith("bias_add") for op in weight)  # bias fused
    by_name = {op["name"]: op for op in doc["operators"]}
    # qkv: K = 192, N = 576 -> M_v = 576, N_v = 192, N_mvm = 5 tokens, ceil(576/256) * 1 = 3 crossbars
    qkv = by_name["blocks.0.attn.qkv"]
    assert (qkv["m"], qkv["n"], qkv["n_mvm"], qkv["crossbars"]) == (576, 192, 5, 3)
    # fc2: 768 -> 192: 1 * ceil(768/256) = 3; patch embedding 192 x 768: 3; head 1000 x 192: 4
    assert by_name["blocks.0.mlp.fc2"]["crossbars"] == 3
    assert (by_name["patch_embed.proj"]["crossbars"], by_name["head"]["crossbars"]) == (3, 4)
    # patch 3 + 12 blocks * (qkv 3 + proj 1 + fc1 3 + fc2 3) + head 4
    assert doc["totals"]["crossbars"] == 3 + 12 * 10 + 4 == 127
    assert doc["totals"]["cim_capable"] == 1 + 4 * DEPTH + 1
    assert (doc["totals"]["operators"], doc["totals"]["crossbars"]) == zoo.workload_size("vit_tiny") == (320, 127)
