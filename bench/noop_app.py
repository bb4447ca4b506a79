"""A no-op Flask POST endpoint, served by bench/ingest.py exactly as the collector is served
(gunicorn, collector/gunicorn.conf.py, same workers): the framework's own ceiling."""
from __future__ import annotations

from flask import Flask, Response, request

app = Flask(__name__, static_folder=None)


@app.post("/v1/reports")
def reports() -> Response:
    """Read the body and answer 202, doing nothing else."""
    request.get_data(cache=False)
    return Response(b'{"accepted":100}', status=202, mimetype="application/json")
