"""Facts that stay true: write-time duplicate detection, supersession on two clocks (valid and record
time), an append-only history with undo, and optional model consolidation after the write.

Handlers: ``service.memories.facts.handlers`` (imported by the app; not here, since the memories package,
which this one builds on, imports ``service.memories.facts.types``)."""
