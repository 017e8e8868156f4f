"""Pretend an optional package is not installed."""

from __future__ import annotations

import importlib


def hide_package(monkeypatch, module: str) -> None:
    """``importlib.import_module`` raises ModuleNotFoundError for ``module`` and its submodules (as it would if the
    package were missing); everything else imports as usual."""
    real = importlib.import_module

    def without(name, *args, **kwargs):
        if name == module or name.startswith(module + "."):
            raise ModuleNotFoundError(f"No module named '{module}'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", without)
