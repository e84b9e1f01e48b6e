# kraftwerk controller image: the package and its pinned dependencies, nothing else.
FROM python:3.11-slim
WORKDIR /opt/kraftwerk
COPY pyproject.toml README.md ./
COPY protocol ./protocol
COPY server ./server
RUN pip install --no-cache-dir .
ENTRYPOINT ["kraftwerk"]
