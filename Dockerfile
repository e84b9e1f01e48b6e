# kraftwerk image: the package and its pinned dependencies, nothing else. One image
# runs every role of docker-compose.yml (`kraftwerk controller` / `kraftwerk broker`).
# BASE_IMAGE: any image with Python 3.11 and pip first on PATH. scripts/compose-images
# builds one from Debian's packages (kraftwerk-python:bookworm) for machines that
# cannot pull from Docker Hub.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
WORKDIR /opt/kraftwerk
COPY pyproject.toml README.md ./
COPY protocol ./protocol
COPY server ./server
COPY cli ./cli
COPY streams ./streams
COPY pipeline ./pipeline
RUN pip install --no-cache-dir .
# 9093: a controller's CONTROLLER listener; 9092: a broker's PLAINTEXT listener.
EXPOSE 9092 9093
ENTRYPOINT ["kraftwerk"]
