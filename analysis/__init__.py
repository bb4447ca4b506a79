"""deniable.analysis: debias perturbed counts into estimates analysts can read."""
from deniable.analysis.estimate import Estimates, MetricSummary, debias, summarize
from deniable.analysis.sources import HTTPSource, MetricCounts, MetricInfo, RedisSource

__all__ = ["Estimates", "HTTPSource", "MetricCounts", "MetricInfo", "MetricSummary",
           "RedisSource", "debias", "summarize"]
