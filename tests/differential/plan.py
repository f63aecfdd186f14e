"""How the work is shared between lab boots (pure).

The default profile's scenarios (every scenario runs there) are split over all boots; the
random steps follow one share of them on the same proxies; every other profile goes to the
boot with the least work so far. The weights are seconds measured in the lab (one boot's
share of a loaded machine), kept only to balance the boots.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PROFILE = "default"
# Seconds of lab time each piece took (one boot of two on a loaded machine, whose every
# sync of kube-proxy took 50-120 s): all default scenarios, a random step (about 20 to a
# batch, one sync each, and a sync for each example's teardown), a profile.
DEFAULT_SCENARIOS_COST = 1100.0
RANDOM_COST_PER_STEP = 6.0
PROFILE_COST = 320.0


@dataclass(frozen=True)
class Work:
    """One profile's run in a boot: its share ``part`` of the scenarios (``index``,
    ``count``), then ``steps`` random steps under the same proxies."""

    profile: str
    part: tuple[int, int] = (0, 1)
    steps: int = 0

    def __str__(self) -> str:
        return f"{self.profile}:{self.part[0]}/{self.part[1]}:{self.steps}"

    @classmethod
    def parse(cls, text: str) -> Work:
        profile, part, steps = text.split(":")
        index, count = part.split("/")
        return cls(profile, (int(index), int(count)), int(steps))


def shares(boots: int, steps: int, profiles: list[str]) -> list[list[Work]]:
    """Each boot's work, first the default profile's share (with the random steps on the
    last boot), then other profiles, each to the least loaded boot."""
    count = max(1, boots)
    plans = [[Work(DEFAULT_PROFILE, (index, count))] for index in range(count)]
    plans[-1][0] = Work(DEFAULT_PROFILE, (count - 1, count), steps)
    load = [DEFAULT_SCENARIOS_COST / count for _ in range(count)]
    load[-1] += steps * RANDOM_COST_PER_STEP
    for name in profiles:
        if name == DEFAULT_PROFILE:
            continue
        least = min(range(count), key=lambda index: (load[index], index))
        plans[least].append(Work(name))
        load[least] += PROFILE_COST
    return plans
