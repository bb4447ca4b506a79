"""deniable.collector."""
