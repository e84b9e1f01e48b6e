# Python 3.11 (Debian bookworm's) in a venv at /opt/python, on the debootstrap base
# (scripts/compose-images): what python:3.11-slim gives, built without Docker Hub.
FROM kraftwerk-base:bookworm
COPY certs/ /usr/local/share/ca-certificates/
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates python3 python3-venv \
    && update-ca-certificates \
    && python3 -m venv /opt/python \
    && rm -rf /var/lib/apt/lists/*
# The venv's pip checks servers against its own bundle unless told to use the system's,
# which holds any proxy CA copied in above.
ENV PATH=/opt/python/bin:$PATH \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    PIP_DISABLE_PIP_VERSION_CHECK=1
