# quantgate worker image (CPU): the pipeline plus a Prefect worker for the `quantgate` process pool.
#   docker build -t quantgate .
#   docker run -e PREFECT_API_URL=http://HOST:4200/api -v quantgate-store:/data quantgate
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    QUANTGATE_STORE=/data/store

# libgomp: Paddle's OpenMP runtime; libgl1/libglib2.0-0: opencv-python, which paddleslim pins.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 libgl1 libglib2.0-0 \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/quantgate
COPY pyproject.toml README.md prefect.yaml ./
COPY quantgate ./quantgate
COPY flows ./flows
COPY stages ./stages
COPY artifacts ./artifacts
RUN pip install -e .

VOLUME ["/data"]
CMD ["prefect", "worker", "start", "--pool", "quantgate", "--type", "process"]
