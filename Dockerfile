# The specperf image: what README's install does (specperf and its dependencies, in a venv), and
# it runs the Slack bot. Engines are not in it: they live on the GPU hosts, each in its own
# environment. git is the one system package: compare resolves refs and makes worktrees with it.
# tests/test_dockerfile.py builds it with podman from a local Debian base (no registry answers
# on CI machines: scripts/setup-containers), then runs `specperf --help`, the fast tier and the
# bot (answering a signed request from the Slack emulator) in it.
#
#   docker build -t specperf .                     # on python:3.12-slim; --build-arg BASE=... for another
#   docker run -e SLACK_BOT_TOKEN -e SLACK_APP_TOKEN -v $PWD/specperf.toml:/etc/specperf/specperf.toml \
#              -v specperf-data:/data specperf                      # Socket Mode (the default)
#   docker run ... -p 3000:3000 specperf bot --mode http            # HTTP mode, Slack -> :3000/slack/events
#
# BASE: any Debian-like image with python3 (3.11 to 3.13) and its venv module.
ARG BASE=python:3.12-slim
FROM ${BASE}
RUN command -v git >/dev/null || { apt-get update && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*; }
WORKDIR /opt/specperf
COPY pyproject.toml README.md ./
COPY core ./core
COPY bot ./bot
COPY storage ./storage
RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir .
ENV PATH=/opt/venv/bin:$PATH SPECPERF_CONFIG=/etc/specperf/specperf.toml SPECPERF_HOME=/data PYTHONUNBUFFERED=1
VOLUME /data
EXPOSE 3000
ENTRYPOINT ["specperf"]
CMD ["bot"]
