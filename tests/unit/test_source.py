from __future__ import annotations

import json
from pathlib import Path

import pytest

from ipvsproxy.cluster.source import SourceError, load_snapshot
from ipvsproxy.model import ObjectKey
from tests.unit.test_bounded_load import LAUGHS

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


SERVICE = "kind: Service\nmetadata: {name: one, namespace: x}\nspec: {clusterIP: 10.0.0.1}\n"


@pytest.mark.parametrize("layout", ["empty file", "empty folder", "folder without manifests"])
def test_a_source_without_services_is_an_error_naming_it(tmp_path: Path, layout: str) -> None:
    path = tmp_path / "src"
    if layout == "empty file":
        path.write_text("")
    else:
        path.mkdir()
        if layout == "folder without manifests":
            (path / "README.md").write_text("# notes\n")
            (path / "nodes.yaml").write_text("kind: Node\nmetadata: {name: n}\n")
    with pytest.raises(SourceError) as raised:
        load_snapshot(path, None)
    assert str(raised.value) == (
        f"{path}: no Service found; planning with none would remove every virtual server "
        "(pass --allow-empty if that is meant)"
    )
    snapshot, _ = load_snapshot(path, None, allow_empty=True)
    assert not snapshot.services


def test_dot_files_and_dot_folders_are_not_read(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(SERVICE)
    (tmp_path / ".b.yaml").write_text(SERVICE.replace("one", "hidden"))
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "c.yaml").write_text(SERVICE.replace("one", "in-git"))
    snapshot, _ = load_snapshot(tmp_path, None)
    assert set(snapshot.services) == {ObjectKey("x", "one")}


def test_duplicate_objects_are_named_with_the_one_used(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(SERVICE)
    (tmp_path / "b.yaml").write_text(SERVICE.replace("10.0.0.1", "10.0.0.2"))
    snapshot, rejections = load_snapshot(tmp_path, None)
    assert snapshot.services[ObjectKey("x", "one")].cluster_ips == ("10.0.0.2",)
    assert (
        f"{tmp_path / 'b.yaml'}: Service x/one",
        f"also defined in {tmp_path / 'a.yaml'}; this later one is used",
    ) in [(r.object, r.reason) for r in rejections]


def test_an_object_given_twice_in_one_list_is_its_later_one_alone(tmp_path: Path) -> None:
    # Items of a JSON List are parsed as they come: the earlier one's own problems (no
    # spec) must not be reported once a later one takes its place.
    path = tmp_path / "list.json"
    earlier = {"kind": "Service", "metadata": {"name": "one", "namespace": "x"}}
    later = {**earlier, "spec": {"clusterIP": "10.0.0.2", "ports": [{"port": 80}]}}
    path.write_text(json.dumps({"apiVersion": "v1", "items": [earlier, later], "kind": "List"}))
    snapshot, rejections = load_snapshot(path, None)
    assert snapshot.services[ObjectKey("x", "one")].cluster_ips == ("10.0.0.2",)
    assert [(r.object, r.reason) for r in rejections] == [
        (
            f"{path}: Service x/one",
            "also defined earlier in the same file; this later one is used",
        )
    ]


def test_duplicate_keys_are_named_with_file_and_object(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(SERVICE + "spec: {clusterIP: 10.0.0.3}\n")
    snapshot, rejections = load_snapshot(path, None)
    assert snapshot.services[ObjectKey("x", "one")].cluster_ips == ("10.0.0.3",)
    assert (
        f"{path}: Service x/one",
        "duplicate mapping keys 'spec': the last of each is used",
    ) in [(r.object, r.reason) for r in rejections]


def test_each_rejection_names_its_file(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text(
        json.dumps(
            [
                {"kind": "Service", "metadata": {"name": "one", "namespace": "x"}},
                {"kind": "Service", "metadata": {"name": "Bad Name\n+ forged", "namespace": "x"}},
            ]
        )
    )
    _, rejections = load_snapshot(path, None)
    assert [(r.object, r.reason) for r in rejections] == [
        (f"{path}: Service x/one", "has no spec; nothing to program"),
        (
            f"{path}: Service 'x/Bad Name\\n+ forged'",
            "metadata.name 'Bad Name\\n+ forged' is not a valid Kubernetes name",
        ),
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            LAUGHS,
            "YAML aliases expand the document far beyond its own size",
        ),
        ("[" * 600 + "]" * 600, "nested deeper than 100 levels"),
    ],
)
def test_hostile_files_are_one_line_source_errors(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(SourceError) as caught:
        load_snapshot(path, None)
    assert str(caught.value).startswith(f"{path}: {message}")


def test_a_scalar_beside_an_object_with_duplicate_keys_is_named_not_a_traceback(
    tmp_path: Path,
) -> None:
    # Reported duplicates were looked for inside every object, a bare number included.
    path = tmp_path / "a.json"
    path.write_text(
        '[1, {"kind": "Service", "metadata": {"name": "one", "namespace": "x"}, '
        '"spec": {"clusterIP": "10.0.0.1"}, "spec": {"clusterIP": "10.0.0.2"}}]'
    )
    snapshot, rejections = load_snapshot(path, None)
    assert snapshot.services[ObjectKey("x", "one")].cluster_ips == ("10.0.0.2",)
    assert [(r.object, r.reason) for r in rejections][:2] == [
        (f"{path}: object (unnamed)", "not an object"),
        (f"{path}: Service x/one", "duplicate mapping keys 'spec': the last of each is used"),
    ]
