def dispatch(kind, handle_a):
    match kind:
        case "a":
            handle_a()
            return 1
        case _:
            return 2
