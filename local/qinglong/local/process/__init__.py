"""Local process infrastructure (docs/protocols.md §3.2–§3.3, ADR-0069 §1–§2).

``launcher`` (LocalProcessLauncher: the six launch steps), ``launched`` (LaunchedProcess:
start gate, signals, wait), ``receipt_store`` (receipt files and the attempt lock),
``wrapper`` (the bundled script, run from a sealed memfd, never imported), ``wrapper_digest``
(its pinned SHA-256). Imports nothing from recovery, execution or app.
"""
