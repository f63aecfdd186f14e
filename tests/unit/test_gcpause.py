import gc

import pytest

from ipvsproxy.gcpause import decode_json


@pytest.mark.parametrize("enabled", [True, False])
def test_decode_json_leaves_the_collector_as_it_found_it(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        if enabled:
            gc.enable()
        else:
            gc.disable()
        assert decode_json(b'{"items": [{"kind": "Service"}]}') == {"items": [{"kind": "Service"}]}
        assert gc.isenabled() is enabled
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()


def test_decode_json_refuses_what_json_refuses() -> None:
    with pytest.raises(ValueError):
        decode_json("{not json")
    assert gc.isenabled()
