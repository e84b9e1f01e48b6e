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


@pytest.fixture(scope="session")
def kraftwerk_image(docker_engine):
    try:
        build_images("kraftwerk")
    except ComposeUnavailable as exc:
        pytest.skip(str(exc))
    return "kraftwerk:0.1.0"


@pytest.fixture(scope="session")
def zookeeper_image(docker_engine):
    try:
        build_images("zookeeper")
    except ComposeUnavailable as exc:
        pytest.skip(str(exc))
    return "kraftwerk-zookeeper:3.8"


@pytest.fixture(scope="session")
def kafka_image(docker_engine):
    try:
        build_images("kafka")
    except ComposeUnavailable as exc:
        pytest.skip(str(exc))
    return "kraftwerk-kafka:4.4.0"
