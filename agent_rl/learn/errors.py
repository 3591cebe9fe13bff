"""The learner's one error type, shared by its modules."""

from __future__ import annotations


class LearnerError(RuntimeError):
    """Data the learner cannot train on, or a model it cannot build."""
