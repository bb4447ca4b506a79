"""What the collector and the analysis both need, pure and without I/O: the Redis key layout
(``keys``), hour indexes and periods (``periods``, ``rollup``), window maths (``window``) and
plain-language explanations (``explain``)."""
