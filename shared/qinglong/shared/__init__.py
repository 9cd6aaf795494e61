"""Contracts shared by every profile: domain types, state machines, codecs, ports, errors.

Stdlib only (docs/architecture.md §1). Nothing here opens a database, a socket or a file of its own,
except the Linux process primitives in :mod:`qinglong.shared.process`.
"""
