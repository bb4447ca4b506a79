"""What the collector and the analysis both need, pure and without I/O: the Redis key layout
(``keys``), hour indexes and periods (``periods``, ``rollup``), the window maths and the one
estimator of every kind (``window``: ``debias_line``, on floats or numpy arrays) and
plain-language explanations (``explain``). No numpy import: callers with arrays pass numpy
in as ``xp``."""
