"""Helpers for tests that run both twins of a hot path on the same inputs."""
from __future__ import annotations


def outcome(fn, *args):
    """``("ok", result)`` or ``(exception type, message)``: what a call did, so two twins'
    results and errors compare equal exactly when they behaved alike."""
    try:
        return "ok", fn(*args)
    except Exception as exc:  # noqa: BLE001 - comparing what both twins raise
        return type(exc), str(exc)
