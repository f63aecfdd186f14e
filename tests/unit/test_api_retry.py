from __future__ import annotations

from ipvsproxy.cluster.connection import RetryPolicy


def test_delays_double_up_to_the_cap() -> None:
    policy = RetryPolicy(first_delay=0.5, max_delay=1.5)
    assert [policy.delay(attempt, None) for attempt in range(4)] == [0.5, 1.0, 1.5, 1.5]


def test_retry_after_wins_but_is_capped() -> None:
    policy = RetryPolicy(first_delay=0.5, max_delay=5.0)
    assert policy.delay(0, "2") == 2.0
    assert policy.delay(0, "120") == 5.0
    # An HTTP-date Retry-After is not worth parsing for a bounded retry: the doubling applies.
    assert policy.delay(1, "Wed, 21 Oct 2026 07:28:00 GMT") == 1.0
