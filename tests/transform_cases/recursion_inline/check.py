"""The inline form adds no frame per call: the recursion reaches (about) the depth it reached
before, with telemetry on and off; the decorator form's wrapper would cut it to about 2/3."""

import sys


def _deepest(depth):
    low, high = 0, sys.getrecursionlimit()
    while low < high:  # the largest n that returns
        mid = (low + high + 1) // 2
        try:
            depth(mid)
        except RecursionError:
            high = mid - 1
        else:
            low = mid
    return low


def _returns(depth, n):
    try:
        return depth(n) == n
    except RecursionError:
        return False


def check(before, after, otel, exporter):
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(600)
    try:
        pristine = _deepest(before.depth)
        # enabled: the SDK's start_span needs some frames of its own at the deepest level, no more
        enabled = _returns(after.depth, pristine - 40)
        otel.disable()
        disabled = _returns(after.depth, pristine), _returns(after.depth, pristine + 1)
    finally:
        sys.setrecursionlimit(limit)
    assert pristine > 400
    assert enabled, pristine
    assert disabled == (True, False), (pristine, disabled)  # exactly the pristine depth
    assert len(exporter.get_finished_spans()) == pristine - 40 + 1
    tree = after.Tree([after.Tree([after.Tree()]), after.Tree()])
    assert tree.height() == 3 and tree.size() == 4
