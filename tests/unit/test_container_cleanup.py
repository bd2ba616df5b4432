"""The container tests' cleanup of /var/lib/containers (tests/container/conftest.py): when the session
found none, it removed the whole tree at its end, and with it any podman storage a user made meanwhile
(``make image`` run beside the tests). Only podman import's blob-info cache, and directories left
empty, may go."""

from __future__ import annotations

from tests.container.conftest import remove_blob_cache


def test_a_users_storage_made_during_the_session_stays(tmp_path):
    root = tmp_path / "containers"
    (root / "cache").mkdir(parents=True)
    (root / "cache" / "blob-info-cache-v1.boltdb").write_bytes(b"bolt")
    image = root / "storage" / "overlay-images" / "images.json"
    image.parent.mkdir(parents=True)
    image.write_text("[]")
    remove_blob_cache(root)
    assert image.read_text() == "[]"
    assert not (root / "cache").exists()


def test_what_podman_import_alone_made_is_removed_whole(tmp_path):
    root = tmp_path / "containers"
    (root / "cache").mkdir(parents=True)
    (root / "cache" / "blob-info-cache-v1.sqlite").write_bytes(b"")
    remove_blob_cache(root)
    assert not root.exists()
    remove_blob_cache(root)  # nothing there: nothing to do
