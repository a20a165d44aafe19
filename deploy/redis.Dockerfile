# redis:7.0 for a machine with no registry (tools/compose.py builds it only then): Debian bookworm's
# redis-server 7.0 on the local base image, run as in the official image (user redis, data in /data,
# the command given by compose).
ARG BASE=fixlab-python:3.11-bookworm
FROM ${BASE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server redis-tools \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data && chown redis:redis /data
WORKDIR /data
USER redis
EXPOSE 6379
CMD ["redis-server"]
