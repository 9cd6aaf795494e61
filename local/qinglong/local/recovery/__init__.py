"""qinglong.local.recovery: decisions from durable facts and journal-driven maintenance.

``reconciler`` (receipt-first startup recovery), ``manual`` (operator resolution),
``quarantine`` (invalid receipts: intent first, then the move), ``cleanup_scanner`` and
``lifecycle`` (the receipt cleanup journal, ADR-0069 §4–§6), ``retention`` (log retirement
with tombstones and run history pruning). May import ``process`` and ``storage``; never
``execution`` or ``app``.
"""
