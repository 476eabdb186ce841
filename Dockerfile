# The specperf image: what README's install does (specperf and its dependencies), and it runs
# the Slack bot. Engines are not in it: they live on the GPU hosts, each in its own environment.
# git is the one system package: compare resolves refs and makes worktrees with it.
# scripts/test-pythons builds it and runs `specperf --help` and the fast tier in it wherever a
# Docker daemon answers (and says so where none does).
#
#   docker build -t specperf .
#   docker run -e SLACK_BOT_TOKEN -e SLACK_APP_TOKEN -v $PWD/specperf.toml:/etc/specperf/specperf.toml \
#              -v specperf-data:/data specperf                      # Socket Mode (the default)
#   docker run ... -p 3000:3000 specperf bot --mode http            # HTTP mode, Slack -> :3000/slack/events
FROM python:3.12-slim
RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/specperf
COPY pyproject.toml README.md ./
COPY core ./core
COPY bot ./bot
COPY storage ./storage
RUN pip install --no-cache-dir .
ENV SPECPERF_CONFIG=/etc/specperf/specperf.toml SPECPERF_HOME=/data PYTHONUNBUFFERED=1
VOLUME /data
EXPOSE 3000
ENTRYPOINT ["specperf"]
CMD ["bot"]
