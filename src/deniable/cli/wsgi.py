"""WSGI entry point with the dashboard's open-domain decoder: ``gunicorn deniable.cli.wsgi:app``.

The app ``deniable serve`` runs (``serve.collector_app``): the collector's, plus the analysis'
decoder for open metrics when numpy is installed. ``deniable.collector.wsgi:app`` is the
collector alone (its dashboard answers 422 for an open metric). Configured entirely by
``DENIABLE_*`` environment variables.
"""
from deniable.cli.serve import collector_app

app = collector_app()
