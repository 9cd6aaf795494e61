"""Live cluster logs (docs/protocols.md §4.9): chunk appends under the lease, the window,
wake-ups across replicas, raw reads and Server-Sent Events."""
