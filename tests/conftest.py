import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Each test gets its own evaluation cache, never the user's."""
    monkeypatch.setenv("ROPECLI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ROPECLI_DEBUG", raising=False)
