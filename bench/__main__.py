"""``python -m bench NAME [args]``: run one benchmark as Django runs a management command."""
import os
import sys

import django


def main(argv: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    import bench

    if len(argv) < 2 or argv[1] in {"-h", "--help"}:
        print("usage: ./stepwise bench NAME [args]; NAME is one of:\n  " + "\n  ".join(bench.names()))
        return 0 if len(argv) >= 2 else 2
    try:
        command = bench.command(argv[1])
    except KeyError as error:
        print(error.args[0], file=sys.stderr)
        return 2
    command.run_from_argv(["stepwise bench", *argv[1:]])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
