"""Run semantics: validation, the durable store, claims and leases, scheduling, workers.

Entry points: `engine.runtime.Runtime` (build everything from `engine.settings.Settings`),
`engine.store.Store` (the only module with SQL), `engine.execution.worker.Worker`,
`engine.validation.parse_documents`. Submodules are imported qualified
(`from engine import store`) so importing `engine` stays cheap.
"""
