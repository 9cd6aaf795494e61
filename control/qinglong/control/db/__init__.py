"""PostgreSQL access for the control plane: migrations, roles, named SQL (DESIGN.md §4.1)."""
