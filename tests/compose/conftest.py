"""Fixtures of the compose tests: one Docker engine and the images, per session."""

from __future__ import annotations

import pytest

from .harness import ComposeUnavailable, Engine, build_images


@pytest.fixture(scope="session")
def docker_engine():
    try:
        engine = Engine.start()
    except ComposeUnavailable as exc:
        pytest.skip(str(exc))
    yield engine
    engine.stop()


def _image(name: str, tag: str) -> str:
    """`tag`, built by scripts/compose-images (on the layer cache) once per session."""
    try:
        build_images(name)
    except ComposeUnavailable as exc:
        pytest.skip(str(exc))
    return tag


@pytest.fixture(scope="session")
def kraftwerk_image(docker_engine):
    return _image("kraftwerk", "kraftwerk:0.1.0")


@pytest.fixture(scope="session")
def zookeeper_image(docker_engine):
    return _image("zookeeper", "kraftwerk-zookeeper:3.8")


@pytest.fixture(scope="session")
def kafka_image(docker_engine):
    return _image("kafka", "kraftwerk-kafka:4.4.0")
