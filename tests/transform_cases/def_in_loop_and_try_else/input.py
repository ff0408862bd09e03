def scan(items):
    for item in items:
        if item:
            break
    else:

        def fallback():
            return 0

        return fallback()
    while len(items) > 1:
        items = items[1:]
    else:

        def drained():
            return 1

        drained()
    try:
        value = items[0]
    except IndexError:

        def missing():
            return None

        value = missing()
    else:

        def present():
            return value

        value = present()
    finally:

        def cleanup():
            return 2

        cleanup()
    return value
