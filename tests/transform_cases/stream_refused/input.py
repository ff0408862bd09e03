def outside(xs):
    ys = [x + 1 for x in xs]
    return iter(ys)


def looped(groups):
    out = []
    for group in groups:
        out.append(iter(group))
    return out


def comprehended(groups):
    return [iter(g) for g in groups]


def twice(a, b):
    return zip(iter(a), iter(b))
