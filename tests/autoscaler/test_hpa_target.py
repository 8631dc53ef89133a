"""The target utilisation that keeps an HPA's scale point when the VPA moves the CPU request."""
import math

import pytest

from autoscaler.logic.hpa_target import keep_scale_point, scale_point


def test_target_times_request_stays_at_the_scale_point():
    point = scale_point(0.7, 0.5)  # 0.7 of a 500m request: scales at 350m a pod
    for request in (0.4, 0.45, 0.5, 0.6, 0.69):
        target = keep_scale_point(point, request, 0.5, 0.9)
        assert target is not None and math.isclose(target * request, point)


@pytest.mark.parametrize("new_request", [0.3, 0.8])  # targets 1.17 and 0.44: outside 50-90%
def test_outside_the_bounds_the_request_is_held(new_request):
    assert keep_scale_point(scale_point(0.7, 0.5), new_request, 0.5, 0.9) is None


@pytest.mark.parametrize("args", [(float("nan"), 1.0, 0.5, 0.9), (0.35, 0.0, 0.5, 0.9), (0.35, 0.5, 0.9, 0.5),
                                  (0.35, float("inf"), 0.5, 0.9), (-0.35, 0.5, 0.5, 0.9)])
def test_bad_numbers_never_give_a_target(args):
    assert keep_scale_point(*args) is None
