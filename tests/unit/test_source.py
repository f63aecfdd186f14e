from __future__ import annotations

import json
from pathlib import Path

import pytest

from ipvsproxy.cluster.source import SourceError, load_snapshot
from ipvsproxy.model import ObjectKey

EXAMPLE = Path(__file__).parents[2] / "examples" / "cluster.yaml"


def test_example_cluster_loads_cleanly() -> None:
    snapshot, rejections = load_snapshot(EXAMPLE, "node-a")
    assert rejections == []
    assert ObjectKey("kube-system", "kube-dns") in snapshot.services
    assert len(snapshot.services) == 5
    assert len(snapshot.endpoint_slices) == 4
    assert snapshot.node is not None
    assert snapshot.node.addresses == ("192.168.10.11",)


def test_multi_document_yaml_json_and_folder(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        "kind: Service\nmetadata: {name: one, namespace: x}\nspec: {clusterIP: 10.0.0.1}\n"
        "---\n---\nkind: Service\nmetadata: {name: two, namespace: x}\n"
    )
    (tmp_path / "b.json").write_text(
        json.dumps({"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n"}}]})
    )
    (tmp_path / "notes.txt").write_text("not a manifest: [")
    snapshot, _ = load_snapshot(tmp_path, "n")
    assert set(snapshot.services) == {ObjectKey("x", "one"), ObjectKey("x", "two")}
    assert snapshot.node is not None


@pytest.mark.parametrize("content", ["kind: [unclosed", "a: b\n c: d: e"])
def test_unparseable_file_is_a_one_line_source_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(SourceError) as caught:
        load_snapshot(path, None)
    assert "\n" not in str(caught.value)
    assert "bad.yaml" in str(caught.value)


def test_missing_path_is_a_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file"):
        load_snapshot(tmp_path / "absent.yaml", None)
