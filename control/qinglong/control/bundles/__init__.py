"""Script bundles at control: records, objects and the push (docs/protocols.md §4.7)."""
