def fill(buf, obj, values, v):
    i = len(values)
    buf[i] = v
    obj.i = v
    buf[obj.rest] = v
    head, *rest = values
    return head, rest
