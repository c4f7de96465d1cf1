"""Regenerate the bundled sample class of lesson 4 from the lesson source.

Each student's notebook shows one typical situation, in one folder per student as an LMS bulk
download gives them (``examples/submissions/lesson04/<id>/lesson04.ipynb``), with the class roster in
``examples/roster.csv``. The files are committed; tests/test_samples.py checks that they are still
what this script writes.

    .venv/bin/python examples/make_samples.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.course import load_course  # noqa: E402
from grader.notebook import build_notebook, dumps  # noqa: E402

OUT = ROOT / "examples/submissions/lesson04"
ROSTER = ROOT / "examples/roster.csv"
# situation -> (student id, name)
STUDENTS = {
    "reference": ("2026001", "张三"),
    "untouched": ("2026002", "李四"),
    "wrong-function": ("2026003", "王五"),
    "syntax-error": ("2026004", "赵六"),
    "vetoed-answer": ("2026005", "钱七"),
    "partial-answers": ("2026006", "孙八"),
}


def sample_path(situation: str) -> Path:
    """Where the sample notebook of one situation lives."""
    return OUT / STUDENTS[situation][0] / "lesson04.ipynb"


def roster_text() -> str:
    return "student,name,email\n" + "".join(f"{sid},{name},\n" for sid, name in STUDENTS.values())


VETOED_Q3 = (
    "DP 的好处是卡越多，每张卡需要存的参数和优化器状态就越少，dp=8 时每卡只存 1/8 的模型。"
    "扩到 512 卡以上时 all-reduce 的延迟随卡数增长，通信掩盖不住，效率下降。"
    "70B 参数按 16 字节算约 1120 GB，远超单卡 80 GB，所以要用 ZeRO/FSDP、TP 和 PP。"
)


def samples() -> dict[str, str]:
    lesson = load_course(ROOT).lessons["lesson04"]
    ref = build_notebook(lesson, reference=True)
    out = {"reference": ref, "untouched": build_notebook(lesson)}

    wrong = build_notebook(lesson, reference=True)
    ex = next(c for c in wrong.cells if c.metadata["course"]["role"] == "exercise")
    # Forgets that buckets are filled in backward order.
    ex.source = ex.source.replace("for name, nbytes in reversed(grads):", "for name, nbytes in grads:")
    out["wrong-function"] = wrong

    broken = build_notebook(lesson, reference=True)
    ex = next(c for c in broken.cells if c.metadata["course"]["role"] == "exercise")
    ex.source = ex.source.replace("def gbs_tokens(mbs, grad_acc, dp, seq):", "def gbs_tokens(mbs, grad_acc, dp, seq)")
    out["syntax-error"] = broken

    vetoed = build_notebook(lesson, reference=True)
    next(c for c in vetoed.cells if c.id == "q3").source = VETOED_Q3
    out["vetoed-answer"] = vetoed

    partial = build_notebook(lesson, reference=True)
    next(
        c for c in partial.cells if c.id == "q2"
    ).source = "因为梯度求和满足结合律，先在本地累加再 all-reduce 一次，结果和每次都同步相同。"
    next(c for c in partial.cells if c.id == "q3").source = "（在此作答）"
    out["partial-answers"] = partial
    return {name: dumps(nb) for name, nb in out.items()}


def main() -> None:
    for situation, text in samples().items():
        path = sample_path(situation)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)} ({situation})")
    ROSTER.write_text(roster_text(), encoding="utf-8")
    print(f"wrote {ROSTER.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
