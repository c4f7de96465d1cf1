"""The bundled sample class is what examples/make_samples.py writes from the current lesson."""

from __future__ import annotations

import importlib.util

from helpers import REPO


def test_samples_are_up_to_date():
    spec = importlib.util.spec_from_file_location("make_samples", REPO / "examples/make_samples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for situation, text in module.samples().items():
        path = module.sample_path(situation)
        assert path.read_text(encoding="utf-8") == text, f"{path} is stale: run examples/make_samples.py"
    assert module.ROSTER.read_text(encoding="utf-8") == module.roster_text()
