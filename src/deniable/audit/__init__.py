"""Empirical privacy checks: the clients' mechanisms against their stated epsilon
(``mechanisms``, with its exact enumerations in ``exactness`` and its loopback upload harness
in ``traffic``) and the server's stored state against the privacy contract (``privacy_scan``)."""
