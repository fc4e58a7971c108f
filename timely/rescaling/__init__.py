"""Live rescaling: a process joins a running cluster (seed 003 §3)."""
