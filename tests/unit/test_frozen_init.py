"""quick_init: the same construction as the dataclass's own __init__, faster, still frozen."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from ipvsproxy import model
from ipvsproxy.frozen_init import quick_init


@dataclasses.dataclass(frozen=True, slots=True)
class GeneratedShape:
    name: str
    sides: int = 4
    tags: list[str] = dataclasses.field(default_factory=list)
    area: float = dataclasses.field(init=False, default=0.0)
    colour: str = dataclasses.field(kw_only=True, default="red")
    derived: str = dataclasses.field(init=False, default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "derived", f"{self.name}/{self.sides}")


@quick_init
@dataclasses.dataclass(frozen=True, slots=True)
class Shape(GeneratedShape):
    """The same fields as GeneratedShape, built by quick_init's __init__."""


def test_signature_is_the_fields_with_their_defaults() -> None:
    parameters = inspect.signature(Shape.__init__).parameters
    assert list(parameters) == ["self", "name", "sides", "tags", "colour"]
    assert parameters["sides"].default == 4
    assert parameters["colour"].kind is inspect.Parameter.KEYWORD_ONLY
    assert Shape.__init__.__qualname__ == "Shape.__init__"


def test_defaults_factories_and_post_init_apply() -> None:
    first, second = Shape("square"), Shape("square")
    assert (first.sides, first.tags, first.area, first.colour) == (4, [], 0.0, "red")
    assert first.tags is not second.tags  # one list from the factory per instance
    assert first.derived == "square/4"
    given = Shape("hex", 6, ["a"], colour="blue")
    assert (given.sides, given.tags, given.colour, given.derived) == (6, ["a"], "blue", "hex/6")
    assert given == Shape("hex", 6, ["a"], colour="blue")


def test_still_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Shape("square").sides = 3  # type: ignore[misc]


def test_wrong_arguments_fail_as_before() -> None:
    with pytest.raises(TypeError):
        Shape()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Shape("square", 4, [], "blue")  # type: ignore[call-arg]


@pytest.mark.parametrize("options", [{"frozen": False, "slots": True}, {"frozen": True}])
def test_refuses_what_it_cannot_speed_up(options: dict[str, bool]) -> None:
    made: type[object] = dataclasses.dataclass(**options)(
        type("Plain", (), {"__annotations__": {"x": int}})
    )
    with pytest.raises(TypeError, match="not a frozen slotted dataclass"):
        quick_init(made)
    with pytest.raises(TypeError):
        quick_init(type("NotADataclass", (), {}))


def test_refuses_a_dataclass_with_an_init_only_variable() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Scaled:
        size: int
        factor: dataclasses.InitVar[int]

    with pytest.raises(TypeError, match="parameters that are not fields"):
        quick_init(Scaled)
    assert Scaled(2, 3).size == 2  # the generated __init__ is kept


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [(("a",), {}), (("b", 3), {}), (("c", 5, ["x"]), {"colour": "green"}), (("d",), {"sides": 0})],
)
def test_same_fields_as_the_generated_init(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    quick, generated = Shape(*args, **kwargs), GeneratedShape(*args, **kwargs)  # type: ignore[arg-type]
    assert dataclasses.astuple(quick) == dataclasses.astuple(generated)


def test_every_frozen_model_class_is_built_by_quick_init() -> None:
    for value in vars(model).values():
        if isinstance(value, type) and dataclasses.is_dataclass(value):
            assert value.__init__.__code__.co_filename == "<string>", value
