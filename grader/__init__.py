"""Build, publish and auto-grade a Quarto course.

The modules follow the data's path: lesson source (``lesson``, ``course``) → build (``build``,
``notebook``, ``release``, ``publish``) → run (``submission``, ``kernel``) → check (``checks``,
``rubric``) → report (``grade``, ``report``).
"""
