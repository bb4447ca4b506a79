"""What the collector and the analysis both need, pure and without I/O: the Redis key layout
(``keys``), hour indexes and periods (``periods``, ``rollup``), the variance split and the
design effect (``variance``), the one estimator of every kind (``estimators``: ``debias_line``
and ``debias_categories``, on floats or numpy arrays), windows (``window``) and
plain-language explanations (``explain``). No numpy import: callers with arrays pass numpy
in as ``xp``."""
