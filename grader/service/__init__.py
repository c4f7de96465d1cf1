"""The course service (``course serve``): students submit notebooks and read their feedback.

Three rooms, each usable without the others:

- storage: ``models`` (SQLAlchemy tables), ``db`` (engine, Alembic migrations), ``store``
  (content-addressed upload files);
- queue: ``queue`` (a durable job table with leases), ``tasks`` (the one grading task),
  ``worker`` (worker processes and their supervisor);
- web: ``web`` (the FastAPI app), ``auth`` (passwords, sessions, CSRF, rate limits), ``metrics``
  (the load figures and ``/metrics``), templates;
- more machines (``course serve --engine celery``, ``course worker``): ``distributed`` (uploads in
  the database, routing by lesson content, claims, the dispatcher) and ``celery_app`` (the Celery
  task and the worker command); ``localcluster`` runs it all on one machine for tests and the bench.

Routes hold no grading logic: they store an upload and enqueue a job; a worker grades it with the
same ``grader.grade.Grader`` the CLI uses.
"""
