"""Deniable: app telemetry under local differential privacy.

The layers, each importing only those before it (the import contract in pyproject.toml, checked
by tests/test_house.py):

    client     deniable.client: embedded in apps; stdlib and requests only.
    core       deniable.core: pure, no I/O; key layout, periods, window maths, explanations.
    collector  deniable.collector: the Flask service.  analysis: reading, estimates, reports.
    audit      deniable.audit: empirical privacy checks of the clients and the stored state.
    cli        deniable.cli: the ``deniable`` command.
"""
