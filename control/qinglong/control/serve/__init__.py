"""``ql3 control serve``: the composition root of a control replica (DESIGN.md §4.5)."""
