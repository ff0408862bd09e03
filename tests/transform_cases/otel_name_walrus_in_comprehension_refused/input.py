def latest(rows):
    seen = [(_otel := row) for row in rows]
    return _otel, seen
