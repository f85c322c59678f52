"""Zoo builds kept on disk: an entry is the build, keyed by what the bytes depend on."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from cimsplit.models import build_cache, zoo

ARGS = {"image_size": 32, "int8": True}


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CIMSPLIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "zoo"


def entry(folder: Path) -> Path:
    return folder / f"{build_cache.build_key('mobilenet_v2', **ARGS)}.onnx"


def test_a_cached_build_is_the_build_and_is_read_back(private_cache: Path) -> None:
    fresh = zoo.build("mobilenet_v2", **ARGS).SerializeToString()
    assert build_cache.cached_build("mobilenet_v2", **ARGS) == fresh
    assert entry(private_cache).read_bytes() == fresh
    # What the entry holds is what comes back: a second call does not build.
    other = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                                                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]))
    entry(private_cache).write_bytes(other.SerializeToString())
    assert build_cache.cached_build("mobilenet_v2", **ARGS) == other.SerializeToString()


def test_an_unreadable_entry_is_built_again(private_cache: Path) -> None:
    entry(private_cache).parent.mkdir(parents=True)
    entry(private_cache).write_bytes(b"\xff\xfe not a model")
    data = build_cache.cached_build("mobilenet_v2", **ARGS)
    assert onnx.load_from_string(data).graph.name == zoo.build("mobilenet_v2", **ARGS).graph.name
    assert entry(private_cache).read_bytes() == data


def test_the_key_follows_the_arguments_and_the_builders_source(monkeypatch: pytest.MonkeyPatch) -> None:
    key = build_cache.build_key("mobilenet_v2", **ARGS)
    assert key == build_cache.build_key("mobilenet_v2", int8=True, image_size=32)  # argument order does not matter
    assert len({key, build_cache.build_key("mobilenet_v2", image_size=32, int8=False),
                build_cache.build_key("mobilenet_v2", image_size=64, int8=True),
                build_cache.build_key("resnet18", **ARGS)}) == 4
    monkeypatch.setattr(build_cache, "_source_digest", lambda: "an edited builder")
    assert build_cache.build_key("mobilenet_v2", **ARGS) != key


def test_a_new_install_replaces_its_stale_entries(private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build_cache.cached_build("mobilenet_v2", **ARGS)
    build_cache.cached_build("mobilenet_v2", image_size=32, int8=False)  # another build: kept
    before = sorted(p.name for p in private_cache.iterdir())
    other = build_cache.build_key("mobilenet_v2", image_size=32, int8=False) + ".onnx"
    monkeypatch.setattr(build_cache, "_source_digest", lambda: "an edited builder")
    build_cache.cached_build("mobilenet_v2", **ARGS)
    after = sorted(p.name for p in private_cache.iterdir())
    assert len(before) == len(after) == 2
    assert entry(private_cache).name in after and entry(private_cache).name not in before
    assert other in before and other in after
