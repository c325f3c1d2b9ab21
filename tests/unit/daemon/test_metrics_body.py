"""/metrics bodies are shared within a second, so an eager scraper cannot starve reconciles."""

from __future__ import annotations

from libvirt_provider.adapters.process.health import MetricsBody


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_body_is_made_once_per_max_age_and_fresh_after_it() -> None:
    clock = Clock()
    made: list[bytes] = []

    def make() -> bytes:
        made.append(f"body {len(made)}".encode())
        return made[-1]

    body = MetricsBody(max_age=1.0, clock=clock)
    assert body.get(make) == b"body 0"
    clock.now += 0.5
    assert body.get(make) == b"body 0"
    clock.now += 0.5
    assert body.get(make) == b"body 1"
    assert len(made) == 2
