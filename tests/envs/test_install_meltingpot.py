"""scripts/install_meltingpot.py: the asset archive dm-meltingpot's build looks for is put in its cache (the real one
when reachable, else an empty one), so the sdist builds without reaching the asset server; nothing here touches the
network or pip."""

from __future__ import annotations

import importlib.util
import tarfile
import urllib.error

import pytest

from tests.helpers.tiny import ROOT


@pytest.fixture()
def installer():
    spec = importlib.util.spec_from_file_location("install_meltingpot", ROOT / "scripts" / "install_meltingpot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_offline_seeding_writes_an_empty_archive_the_build_can_extract(installer, tmp_path, monkeypatch):
    monkeypatch.setattr(installer, "download", lambda *a, **k: pytest.fail("--offline must not try the network"))
    assert installer.main(["--offline", "--seed-only", "--cache-dir", str(tmp_path)]) == 0
    archive = tmp_path / "meltingpot-assets-2.3.0.tar.gz"
    with tarfile.open(archive) as tar:
        assert tar.getnames() == ["assets", "assets/LIT_MARL_PLACEHOLDER.txt"]
        tar.extractall(tmp_path / "meltingpot", filter="data")  # what dm-meltingpot's build_py does with it
    note = (tmp_path / "meltingpot" / "assets" / "LIT_MARL_PLACEHOLDER.txt").read_text()
    assert "Substrates work; bot scenarios need the real" in note
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meltingpot", "meltingpot-assets-2.3.0.tar.gz"]  # no temp


def test_an_unreachable_download_falls_back_to_the_empty_archive(installer, tmp_path, monkeypatch, capsys):
    def unreachable(path, timeout, url=installer.ASSETS_URL):
        raise urllib.error.URLError("no route to host")

    monkeypatch.setattr(installer, "download", unreachable)
    path, action = installer.seed(tmp_path, offline=False, timeout=1)
    assert action == "empty" and tarfile.is_tarfile(path)
    assert "assets unreachable (<urlopen error no route to host>)" in capsys.readouterr().err


def test_a_cached_archive_is_kept_and_a_download_is_used(installer, tmp_path, monkeypatch):
    def download(path, timeout, url=None):
        path.write_bytes(installer.empty_archive())

    monkeypatch.setattr(installer, "download", download)
    path, action = installer.seed(tmp_path / "fresh", offline=False)
    assert action == "downloaded" and tarfile.is_tarfile(path)
    real = tmp_path / "cache" / installer.ARCHIVE_NAME
    real.parent.mkdir()
    with tarfile.open(real, "w:gz") as tar:  # stands in for the real assets: never replaced by a placeholder
        tar.add(tmp_path / "fresh", arcname="assets")
    before = real.read_bytes()
    assert installer.seed(tmp_path / "cache", offline=True) == (real, "kept")
    assert real.read_bytes() == before


def test_the_install_runs_pip_without_dependencies_from_the_seeded_cache(installer, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(installer.subprocess, "call", lambda command, env: calls.append((command, env)) or 0)
    assert installer.main(["--offline", "--cache-dir", str(tmp_path)]) == 0
    ((command, env),) = calls
    assert command[-4:] == ["pip", "install", "--no-deps", "dm-meltingpot==2.4.1"]
    assert env["TMPDIR"] == str(tmp_path)  # the build's tempfile.gettempdir(): where the archive lies
    with pytest.raises(SystemExit):
        installer.main(["--timeout", "0"])
