"""``dprm serve``: the calibrated PRM as an HTTP service (FastAPI + uvicorn).

- :mod:`dprm.serve.settings`: the service's limits and batching window (:class:`ServeSettings`).
- :mod:`dprm.serve.batcher`: one worker thread owns the models; concurrent scoring requests are
  gathered into one PRM forward (:class:`MicroBatcher`).
- :mod:`dprm.serve.service`: what the endpoints compute, through :mod:`dprm.live` and
  :mod:`dprm.ias` (:class:`ScoringService`).
- :mod:`dprm.serve.schemas`: the request and response bodies (the OpenAPI schema).
- :mod:`dprm.serve.app`: the ASGI application; :mod:`dprm.serve.server`: uvicorn around it.

FastAPI and uvicorn are the ``serve`` extra; nothing here is imported by ``import dprm``.
"""
