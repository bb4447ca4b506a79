"""deniable.cli."""
