# kraftwerk image: the package and its pinned dependencies, nothing else. One image
# runs every role of docker-compose.yml (`kraftwerk controller` / `kraftwerk broker`).
FROM python:3.11-slim
WORKDIR /opt/kraftwerk
COPY pyproject.toml README.md ./
COPY protocol ./protocol
COPY server ./server
COPY cli ./cli
COPY streams ./streams
RUN pip install --no-cache-dir .
# 9093: a controller's CONTROLLER listener; 9092: a broker's PLAINTEXT listener.
EXPOSE 9092 9093
ENTRYPOINT ["kraftwerk"]
