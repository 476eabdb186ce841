# The specperf image: what README's install does (specperf and its dependencies), nothing else.
# Engines are not in it: they live on the GPU hosts, each in its own environment.
FROM python:3.11-slim
WORKDIR /opt/specperf
COPY pyproject.toml README.md ./
COPY core ./core
COPY bot ./bot
COPY storage ./storage
RUN pip install --no-cache-dir .
ENTRYPOINT ["specperf"]
CMD ["--help"]
