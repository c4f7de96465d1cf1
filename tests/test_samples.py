"""The bundled sample submissions are what examples/make_samples.py writes from the current lesson."""

from __future__ import annotations

import importlib.util

from helpers import REPO


def test_samples_are_up_to_date():
    spec = importlib.util.spec_from_file_location("make_samples", REPO / "examples/make_samples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, text in module.samples().items():
        path = REPO / "examples/submissions/lesson04" / f"{name}.ipynb"
        assert path.read_text(encoding="utf-8") == text, f"{path.name} is stale: run examples/make_samples.py"
