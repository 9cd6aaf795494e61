"""PostgreSQL access for the control plane: migrations, roles, named SQL (docs/protocols.md
§4.1)."""
