"""Procedurally generated tasks with exact grading (the arithmetic world: :mod:`.arith`)."""
