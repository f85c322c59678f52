"""Must-show numbers on the zoo models, computed by hand with eq. 1 beside each assertion."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from cimsplit.compiler.frontend import LoadedModel, load
from cimsplit.compiler.simplify import tensor_shapes
from cimsplit.models import zoo


def load_zoo(tmp_path: Path, name: str, **kwargs: object) -> LoadedModel:
    model = zoo.build(name, **kwargs)
    path = tmp_path / f"{name}{'_int8' if kwargs.get('int8') else ''}.onnx"
    onnx.save(model, str(path))
    return load(path)


def capable_view(loaded: LoadedModel) -> list[tuple]:
    """GEMM operators' shapes, sorted (node order may differ between float and int8 exports)."""
    return sorted((op.op_type, op.m, op.n, op.n_mvm, op.crossbars, op.n_in, op.n_out)
                  for op in loaded.workload.operators if op.cim_capable)


def test_resnet18(tmp_path: Path) -> None:
    w = load_zoo(tmp_path, "resnet18").workload
    convs = [op for op in w.operators if op.op_type == "Conv"]
    stem = convs[0]
    # stem 7x7/2, 3 -> 64 at 224 -> 112x112: M = 64, N = 3*7*7 = 147, N_mvm = 112*112, 1 crossbar
    assert (stem.m, stem.n, stem.n_mvm, stem.crossbars) == (64, 147, 12544, 1)
    assert len(stem.nodes) == 2  # Conv(+folded BN) + Relu
    # 3x3 conv 512 -> 512 at 7x7: M = 512, N = 512*9 = 4608, N_mvm = 49, crossbars = 2*18 = 36
    deep = [op for op in convs if (op.m, op.n) == (512, 4608)]
    assert len(deep) == 3  # layer4.0.conv2, layer4.1.conv1, layer4.1.conv2
    assert all((op.n_mvm, op.crossbars) == (49, 36) for op in deep)
    (fc,) = [op for op in w.operators if op.op_type == "Gemm"]
    # Gemm 512 -> 1000: M = 1000, N = 512, N_mvm = 1, crossbars = ceil(1000/256)*ceil(512/256) = 4*2
    assert (fc.m, fc.n, fc.n_mvm, fc.crossbars) == (1000, 512, 1, 8)
    # operators: stem, maxpool, 8 blocks x (conv1+relu, conv2, add, relu), 3 downsamples, avgpool, flatten, fc
    assert len(w.operators) == 1 + 1 + 8 * 4 + 3 + 3 == 40
    assert len(w.cim_capable) == 1 + 16 + 3 + 1 == 21
    # crossbars: stem 1; layer1 4x3; layer2 3+5+1+5+5; layer3 5+9+1+9+9; layer4 18+36+2+36+36; fc 8
    assert w.total_crossbars == 1 + 12 + 19 + 33 + 128 + 8 == 201
    assert not [op for op in w.operators if op.op_type in ("BatchNormalization", "Identity", "Shape", "Constant")]


def test_mobilenet_v2_depthwise(tmp_path: Path) -> None:
    loaded = load_zoo(tmp_path, "mobilenet_v2")
    shapes = tensor_shapes(loaded.model)
    nodes = {n.name: n for n in loaded.model.graph.node}
    depthwise = [op for op in loaded.workload.operators if op.weight_shape and op.op_type == "Conv"
                 and op.weight_shape[1] == 1 and op.weight_shape[0] > 1]
    assert len(depthwise) == 17
    for op in depthwise:
        _, c, h, w = shapes[nodes[op.name].output[0]]
        assert op.weight_shape[2:] == (3, 3)
        assert (op.m, op.n, op.n_mvm) == (c, 9, h * w * c)  # N = 1*3*3, N_mvm = H*W*g with g = C
        assert op.crossbars == math.ceil(c / 256)
    # the first depthwise conv: 32 channels at 112x112
    assert (depthwise[0].n_mvm, depthwise[0].crossbars) == (112 * 112 * 32, 1)
    # the widest: 960 channels at 7x7 -> ceil(960/256) = 4 crossbars
    widest = max(depthwise, key=lambda op: op.m)
    assert (widest.m, widest.n_mvm, widest.crossbars) == (960, 7 * 7 * 960, 4)


@pytest.mark.parametrize("name", ["mobilenet_v2", "yolov5n"])
def test_int8_qdq_zoo_matches_float(tmp_path: Path, name: str) -> None:
    size = 224 if name == "mobilenet_v2" else 320
    fp = load_zoo(tmp_path, name, image_size=size)
    q = load_zoo(tmp_path, name, image_size=size, int8=True)
    assert len(q.workload.operators) == len(fp.workload.operators)
    assert capable_view(q) == capable_view(fp)
    assert q.workload.total_crossbars == fp.workload.total_crossbars
    assert sorted(e.elements for e in q.workload.edges) == sorted(e.elements for e in fp.workload.edges)


def test_int8_qdq_resnet18_matches_float_gemms(tmp_path: Path) -> None:
    fp = load_zoo(tmp_path, "resnet18")
    q = load_zoo(tmp_path, "resnet18", int8=True)
    assert capable_view(q) == capable_view(fp)
    assert q.workload.total_crossbars == fp.workload.total_crossbars == 201
    # The zoo quantizes with QDQKeepRemovableActivations, so the residual Relus stay.
    assert len(q.workload.operators) == len(fp.workload.operators) == 40


def test_yolov5n_silu_is_fused(tmp_path: Path) -> None:
    w = load_zoo(tmp_path, "yolov5n", image_size=320).workload
    convs = [op for op in w.operators if op.op_type == "Conv"]
    assert len(convs) == 60  # 57 Conv+BN+SiLU blocks + 3 Detect 1x1 convs
    silu = [op for op in convs if len(op.nodes) == 3]  # Conv, Sigmoid, Mul
    assert len(silu) == 57
    assert sum(len(op.nodes) == 1 for op in convs) == 3
    stem = convs[0]
    # stem 6x6/2, 3 -> 16 at 320 -> 160x160: M = 16, N = 3*6*6 = 108, N_mvm = 160*160
    assert (stem.m, stem.n, stem.n_mvm, stem.crossbars) == (16, 108, 25600, 1)
    assert not [op for op in w.operators if op.op_type in ("Identity", "Shape", "Constant")]
    # the only Sigmoids left as operators are the 3 Detect outputs'
    assert sum(op.op_type == "Sigmoid" for op in w.operators) == 3


def test_simplified_resnet18_gives_the_original_outputs(tmp_path: Path) -> None:
    original = zoo.build("resnet18", image_size=64)
    path = tmp_path / "r18.onnx"
    onnx.save(original, str(path))
    loaded = load(path)
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    outs = []
    for model in (original, loaded.model):
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        outs.append(session.run(None, {"input": x})[0])
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-3, atol=1e-4)
