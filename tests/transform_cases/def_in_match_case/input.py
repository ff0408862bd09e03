def dispatch(command):
    match command:
        case "a":

            def run_a():
                return 1

            return run_a()
        case {"kind": kind} if kind:

            def run_kind():
                return kind

            return run_kind()
        case _:

            def run_other():
                return 2

            return run_other()
