"""``ql3 control serve``: the composition root of a control replica (docs/protocols.md §4.5)."""
