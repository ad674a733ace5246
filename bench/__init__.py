"""Benchmarks, load drivers, simulations and stand-in servers.

This package imports the product and is never imported by it (an import-linter contract).
Each benchmark is a Django command class in ``bench/commands/``; run one with
``./stepwise bench NAME [args]`` (``python -m bench NAME``), or from a test with
``bench.call(NAME, ...)``, which takes the arguments ``call_command`` takes.
"""
import importlib
import pkgutil

from django.core.management import BaseCommand, call_command


def names() -> list[str]:
    from bench import commands  # the package itself, to list its modules

    return sorted(module.name for module in pkgutil.iter_modules(commands.__path__))


def command(name: str) -> BaseCommand:
    if name not in names():
        raise KeyError(f"no benchmark {name!r}; the benchmarks are: {', '.join(names())}")
    return importlib.import_module(f"bench.commands.{name}").Command()


def call(name: str, *args, **options):
    return call_command(command(name), *args, **options)
