"""WSGI entry point for gunicorn: ``gunicorn deniable.collector.wsgi:app``.

Configured entirely by ``DENIABLE_*`` environment variables.
"""
from deniable.collector.app import create_app

app = create_app()
