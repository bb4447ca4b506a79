"""Empirical privacy checks: the clients' mechanisms against their stated epsilon
(``mechanisms``) and the server's stored state against the privacy contract (``privacy_scan``)."""
